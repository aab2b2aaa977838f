"""Planned tensor-core main loops (plan_matmul's `For.plan`), from Jinja templates, and the wgmma device functions.

`templates/matmul_mma.j2` (cp.async + ldmatrix + mma.sync) and `templates/matmul_wgmma.j2`
(TMA + mbarriers + wgmma, warp-specialized) hold the main-loop skeletons (`passes/plan_matmul.py`
decides which); this module fills in the operand geometry (tensor names, slice starts, dims,
shared-memory offsets) and the per-shape `wgmma` instruction wrappers, and records the TMA
descriptors' parameters (plan_tma's maps). `templates/wgmma_fn.j2` holds the wgmma instruction's PTX.
Products of register tiles are codegen/products.py's. `render_mma` and `render_wgmma` take the
MainLoopEmitter (`em`: its facts, expression emitter and writer).
"""
from __future__ import annotations

from .. import ast as A
from ..exprs import unparse_stmt
from ..passes.plan_tma import main_box
from ..passes.plan_matmul import MatmulPlan, has_tile, mma_stage, swizzle_elems
from ..passes.plan_tma_store import BOX_ROWS, kernel_tma_stores
from ..types import DType, MmaStrategy
from .c import storage
from .context import KernelFacts, Scope
from .env import macros, template
from .writer import Writer

PTX_TYPE = {DType.BF16: "bf16", DType.F16: "f16", DType.F8E4M3: "e4m3", DType.F8E5M2: "e5m2"}
# K of one wgmma instruction per operand dtype: 32 bytes of K either way (k16 of bf16/f16, k32 of fp8)
WGMMA_K = {DType.BF16: 16, DType.F16: 16, DType.F8E4M3: 32, DType.F8E5M2: 32}
PRODUCER_REGS = 40
REGISTER_FILE = 65536


def operand_matrix(em, op) -> dict:
    """C expressions of the row-major matrix a main-loop operand slices: `ptr` (the tensor, or for a batched
    operand the start of its batch's matrix), `nrows`, `ncols`, and `decl`, lines declaring what they use. A
    batch index outside the tensor makes the matrix empty (0 rows) at the tensor's start: its tiles read zeros."""
    dims = em.facts.tensors[op.tensor].type.dims
    r = len(dims)
    nrows, ncols = em.facts.dim(op.tensor, r - 2), em.facts.dim(op.tensor, r - 1)
    if not op.batch:
        return dict(ptr=op.tensor, nrows=nrows, ncols=ncols, decl=[])
    terms, oks = [], []
    for ax, item in enumerate(op.batch):
        i = f"(long long)({em.expr.scalar(item)})"
        terms.append(f"{i} * {em.facts.stride(op.tensor, ax)}")
        oks.append(f"(unsigned long long){i} < (unsigned long long){em.facts.dim(op.tensor, ax)}")
    ok, ptr = em.out.fresh("tx_zok"), em.out.fresh("tx_zp")
    S = storage(DType(em.facts.tensors[op.tensor].type.dtype))
    decl = [f"const bool {ok} = {' && '.join(oks)};  // {op.tensor}'s batch index inside the tensor (else zeros)",
            f"const {S}* const {ptr} = {op.tensor} + ({ok} ? {' + '.join(terms)} : 0LL);"]
    return dict(ptr=ptr, nrows=f"({ok} ? (long long){nrows} : 0LL)", ncols=ncols, decl=decl)


def main_coords(em, op, inner: str, outer: str) -> str:
    """The TMA coordinates, innermost first, of a main-loop operand's box at (`inner` column, `outer` row) of
    its matrix: those two for a rank-2 tensor; for a batched one the batch indices after them. An empty tensor
    (a dim of 0, encoded as 1 by the host) gets its boxes wholly before row 0, so nothing is read."""
    if not op.batch:
        return f"{inner}, {outer}"
    dims = em.facts.tensors[op.tensor].type.dims
    empty = [f"{em.facts.dim(op.tensor, ax)} > 0" for ax, d in enumerate(dims) if not isinstance(d, A.IntLit)]
    if empty:
        outer = f"({' && '.join(empty)}) ? (int)({outer}) : -256"
    return ", ".join([inner, outer] + [f"(int)({em.expr.scalar(i)})" for i in reversed(op.batch)])


def wgmma_wrapper(n: int, dt, tnsp_b: bool, parts: int = 1, a_regs: bool = False) -> tuple[str, str]:
    """(name, C++ text) of a device function issuing one wgmma.m64n{n}k16 with both operands in shared memory
    (or, with a_regs, A from four registers of packed pairs: the row fragment of a 64x16 block), from the
    macro of templates/wgmma_fn.j2.

    With parts > 1 the n columns are `parts` products' B tiles side by side (one A): the function takes
    one accumulator array per product, whose registers are the consecutive column blocks of the result.
    """
    assert parts == 1 or not a_regs
    k = WGMMA_K[dt]
    name = (f"wgmma_m64n{n}k{k}_{PTX_TYPE[dt]}{'_rs' if a_regs else ''}_{'mn' if tnsp_b else 'k'}"
            + (f"_x{parts}" if parts > 1 else ""))
    regs = n // 2
    per = regs // parts
    arrays = ["d"] if parts == 1 else [f"d{j}" for j in range(parts)]
    outs = [[f"{arrays[j // per]}[{j % per}]" for j in range(i, min(regs, i + 8))] for i in range(0, regs, 8)]
    params = ", ".join(f"float (&{a})[{per}]" for a in arrays)
    text = macros("wgmma_fn.j2").wgmma_fn(name, params, n, PTX_TYPE[dt], regs, outs, tnsp_b, a_regs, k)
    return name, str(text)


def launch_regs(threads: int, min_blocks: int = 1) -> int:
    """Registers per thread a block of `threads` holds at launch: what `__launch_bounds__(threads, min_blocks)` lets
    ptxas give it (the register file over the resident threads, in the allocation's steps of 8, at most 255), and
    what ptxas gives a kernel that runs setmaxnreg up to that bound (nvcc 13.0: 168 at 384 threads, 96 at 640; at
    256 threads the largest setmaxnreg count, 240)."""
    return min(255, REGISTER_FILE // (threads * max(1, min_blocks))) // 8 * 8


def register_split(consumers: int, producers: int = 128, min_blocks: int = 1) -> tuple[int, int]:
    """(producer, consumer) registers per thread for setmaxnreg.dec / .inc in a warp-specialized block of
    `consumers` + `producers` threads. setmaxnreg moves registers through a pool of the block's own: .dec gives
    the producer's surplus to it and .inc waits until the pool holds what it asks, so the consumers may take only
    what the block held at launch, `launch_regs` per thread, less the producer's share. Asking more blocks a
    consumer warpgroup forever (four consumer warpgroups asked 112 of a 96-register launch: the session-18 hang
    at BM=256); tests/test_gemm_registers.py checks the sum against ptxas's count."""
    held = launch_regs(consumers + producers, min_blocks)
    dec = min(PRODUCER_REGS, held)
    inc = (held * (consumers + producers) - dec * producers) // consumers // 8 * 8
    return dec, min(240, inc)  # above 240 ptxas holds 240 at launch (1 consumer warpgroup: 256 threads)


def render_mma(em, s, plan: MatmulPlan) -> dict:
    a = plan.products[0].a
    kmajor_b = plan.products[0].b.kmajor
    lda, ldb, a_stage, b_stage = mma_stage(plan.bm, plan.bn, plan.bk, kmajor_b)
    products = []
    am = operand_matrix(em, a)
    decl = list(am["decl"])
    for p in plan.products:
        b = p.b
        if kmajor_b:
            brows, bcols, r0, c0 = plan.bn, plan.bk, em.expr.scalar(b.rows), em.expr.scalar(b.k)
        else:
            brows, bcols, r0, c0 = plan.bk, plan.bn, em.expr.scalar(b.k), em.expr.scalar(b.rows)
        bm_ = operand_matrix(em, b)
        decl += bm_["decl"]
        products.append(dict(acc=p.acc, b=b.tensor, ptr=bm_["ptr"], brows=brows, bcols=bcols, r0=r0, c0=c0,
                             nrows=bm_["nrows"], ncols=bm_["ncols"], shift=b.tensor in plan.shifted))
    wm, wn = plan.bm // plan.warps_m, plan.bn // plan.warps_n
    ctx = dict(text=_text(s), stages=plan.stages, bm=plan.bm, bn=plan.bn, bk=plan.bk, S=plan.dtype.ctype,
               warps_m=plan.warps_m, warps_n=plan.warps_n, wm=wm, wn=wn, rm=wm // 16, rn=wn // 8,
               lda=lda, ldb=ldb, a_stage=a_stage, b_stage=b_stage, kmajor_b=kmajor_b,
               threads=plan.consumers, products=products, var=s.var, smem=em.facts.smem, decl=decl,
               start=em.expr.scalar(s.start), stop=em.expr.scalar(s.stop), step=em.expr.scalar(s.step),
               a=dict(tensor=a.tensor, ptr=am["ptr"], rows=em.expr.scalar(a.rows), k=em.expr.scalar(a.k),
                      nrows=am["nrows"], ncols=am["ncols"], shift=a.tensor in plan.shifted),
               shifted=bool(plan.shifted))
    em.out.need("tilex_mma.cuh")
    if plan.shifted:
        em.out.need("tilex_shift.cuh")
    return ctx


def render_wgmma(em, s, plan: MatmulPlan) -> dict:
    a = plan.products[0].a
    bm, bn, bk = plan.bm, plan.bn, plan.bk
    item = plan.dtype.itemsize  # bytes an element: 2 (bf16/f16), 1 (fp8); a 128-byte row holds `swz` of them
    swz = swizzle_elems(plan.dtype)
    boxes, products = [], []

    def box(op, rows: int, offset: int, inner: str, outer: str) -> dict:
        """One TMA box of `rows` rows of 64 columns at (inner, outer) of operand `op`'s matrix, `offset` bytes
        into the stage: a 2-D copy, or for a batched operand an N-D one with the batch coordinates."""
        return dict(offset=offset, map=em.facts.tma_map(op.tensor, rows, main_box(op, rows, swz)),
                    coords=main_coords(em, op, inner, outer), fn="tilex_tma_box" if op.batch else "tilex_tma_load_2d")

    def k_boxes(op, rows: int, base: int, chunk: int) -> None:
        """TMA boxes of a k-major [rows, bk] operand tile: one per 64-column chunk, `chunk` bytes apart."""
        for c in range(bk // swz):
            boxes.append(box(op, rows, base + c * chunk, _plus(em.expr.scalar(op.k), c * swz), em.expr.scalar(op.rows)))
    k_boxes(a, bm, 0, bm * 128)
    offset = bm * bk * item
    # products sharing a whose k-major B tiles fit side by side in one wgmma (n <= 256) are issued as one
    # m64n(G*bn)k16: their B tiles interleave per 64-column chunk, so one descriptor spans them, and A is
    # read from shared memory once instead of G times (the gated MLP: g and u from one x tile)
    group = len(plan.products)
    merged = group > 1 and all(p.b.kmajor for p in plan.products) and group * bn <= 256
    if merged:
        chunk = group * bn * 128
        for j, p in enumerate(plan.products):
            k_boxes(p.b, bn, offset + j * bn * 128, chunk)
        name, text = wgmma_wrapper(group * bn, plan.dtype, False, parts=group)
        em.out.functions[name] = text
        products.append(dict(acc=", ".join(p.acc for p in plan.products), kmajor=True, offset=offset, fn=name,
                             chunk=chunk))
        offset += group * bn * bk * item
    for p in ([] if merged else plan.products):
        b = p.b
        if b.kmajor:
            k_boxes(b, bn, offset, bn * 128)
        else:
            for q in range(bn // swz):
                boxes.append(box(b, bk, offset + q * bk * 128, _plus(em.expr.scalar(b.rows), q * swz), em.expr.scalar(b.k)))
        name, text = wgmma_wrapper(bn, plan.dtype, not b.kmajor)
        em.out.functions[name] = text
        products.append(dict(acc=p.acc, kmajor=b.kmajor, offset=offset, fn=name, chunk=bn * 128))
        offset += bn * bk * item
    em.out.need("tilex_sm90.cuh")
    if any(op.batch for p in plan.products for op in (p.a, p.b)):
        em.out.need("tilex_tma.cuh")  # tilex_tma_box: the N-D copies of batched operands
    # bk2: the tile's K in 2-byte units, what the consumer's k loop steps through 16 at a time (32 bytes: one
    # k16 wgmma of bf16/f16, one k32 of fp8)
    return dict(text=_text(s), stages=plan.stages, bm=bm, bn=bn, bk=bk, bk2=bk * item // 2, consumers=plan.consumers,
                stage_bytes=offset, boxes=boxes, products=products, group=group, merged=merged, var=s.var,
                start=em.expr.scalar(s.start), stop=em.expr.scalar(s.stop), step=em.expr.scalar(s.step),
                **_registers(em.facts.k, plan))


def _registers(k: A.Kernel, plan: MatmulPlan) -> dict:
    """The setmaxnreg counts of a warp-specialized loop in kernel `k` (its launch bounds: codegen's `_min_blocks`)."""
    dec, inc = register_split(plan.consumers, plan.producers, getattr(k.info, "min_blocks", 0) or 1)
    return dict(producer_regs=dec, consumer_regs=inc)


def _plus(expr: str, c: int) -> str:
    return expr if c == 0 else f"({expr}) + {c}"


def _text(s) -> str:
    """The loop body the template replaces, as source text (the loop header has its own comment)."""
    return "; ".join(unparse_stmt(st) for st in s.body.stmts)


class MainLoopEmitter:
    """A planned tensor-core main loop (`planned_loop`), or a persistent tile loop around a wgmma one
    (`persistent_loop`), whose other statements go back to `stmt` (the Emitter's statement emitter)."""

    def __init__(self, facts: KernelFacts, out: Writer, scope: Scope, expr, stmt, store_source):
        self.facts, self.out, self.scope, self.expr, self.stmt = facts, out, scope, expr, stmt
        self.store_source = store_source  # (register array, layout) of a tile store's values (the Emitter's)

    def planned_loop(self, s: A.For) -> None:
        """A tensor-core main loop, from its template (matmul_mma.j2 or matmul_wgmma.j2)."""
        plan = s.plan
        if plan.strategy == MmaStrategy.WGMMA:
            ctx = render_wgmma(self, s, plan)
        else:
            ctx = render_mma(self, s, plan)
        self.out.text(template(f"matmul_{plan.strategy}.j2").render(barrier=self.scope.barrier, c=ctx, **ctx))

    def persistent_loop(self, outer: A.For, inner: A.For) -> None:
        """A top-level tile loop around a wgmma main loop (a persistent kernel): the producer warpgroup
        runs the tile loop too, with only its scalar statements and the loads, so it fills the ring
        with the next tile's operands while the consumers run this tile's epilogue. The ring position
        (`tx_it`) and the mbarrier phases carry over from tile to tile."""
        out = self.out
        plan = inner.plan
        c = render_wgmma(self, inner, plan)
        parts = macros("matmul_wgmma_parts.j2")
        scalar = self.expr.scalar
        start, stop, step = scalar(outer.start), scalar(outer.stop), scalar(outer.step)
        header = f"for (int {outer.var} = {start}; {outer.var} < {stop}; {outer.var} += {step}) {{"
        out.text(parts.persistent_head(c), strip=False)
        before = outer.body.stmts[: outer.body.stmts.index(inner)]
        out.emit(f"if (threadIdx.x >= {plan.consumers}) {{  // the producer warpgroup")
        out.emit(f"  tilex_setmaxnreg_dec<{c['producer_regs']}>();")
        out.emit(f"  if (threadIdx.x == {plan.consumers}) {{")
        with out.indented(2):
            out.emit("int tx_it = 0;  // ring position, across tiles")
            with out.block(header), self.scope.names(outer.var):
                for st in before:
                    if not (isinstance(st, A.Assign) and not has_tile(st.value)):
                        continue  # the accumulators' initial values: consumer registers
                    self.stmt(st)
                out.text(parts.producer_tile(c), strip=False)
        out.emit("  }")
        out.emit("  return;")
        out.emit("}")
        out.emit(f"tilex_setmaxnreg_inc<{c['consumer_regs']}>();")
        out.emit("int tx_it = 0;  // ring position, across tiles")
        k = self.facts.k
        by_tma = next((ts for o, _, ts in kernel_tma_stores(k, k.info.smem_limit) if o is outer), None)
        staged = [st for st in (by_tma.stores if by_tma is not None else ()) if self._fragment_store(st, plan)]
        with out.block(header), self.scope.names(outer.var):
            for st in outer.body.stmts:
                if st in staged:
                    self.tma_store(st, by_tma, by_tma.stores.index(st), staged[0] is st, c)
                    continue
                if st is not inner:
                    self.stmt(st)
                    continue
                out.emit(f"// {self.facts.at(st.span)}  {unparse_stmt(st).splitlines()[0]}")
                out.text(parts.consumer_tile(c), strip=False)
        if staged:
            out.emit("if (threadIdx.x % 128 == 0) tilex_bulk_wait<0>();  // this warpgroup's stores are done")

    def _fragment_store(self, st: A.Store, plan: MatmulPlan) -> bool:
        """Whether the store's values are in the main loop's accumulator fragment (what `tma_store` stages)."""
        acc = self.facts.k.info.var_layouts.get(plan.products[0].acc)
        return acc is not None and st.target.ty.layout == acc

    def tma_store(self, st: A.Store, ts, index: int, first: bool, c: dict) -> None:
        """A persistent tile's epilogue store through shared memory by TMA (passes/plan_tma_store.py): store
        `index` of `ts` into its own staging buffer; the tile's `first` such store waits for the buffers to be free."""
        out = self.out
        out.emit(f"// {self.facts.file}:{st.span.line}  {unparse_stmt(st)}  (by TMA, from shared memory)")
        with out.block():
            src, _ = self.store_source(st)
            rows, cols = st.target.items
            tensor = st.target.base.id
            S = storage(DType(self.facts.tensors[tensor].type.dtype))
            spec = dict(src=src, S=S, cols=ts.cols, rounds=c["bn"] // ts.cols, map=self.facts.tma_map(tensor, BOX_ROWS),
                        row0=self.expr.scalar(rows.start), col0=self.expr.scalar(cols.start),
                        offset=c["stages"] * c["stage_bytes"] + 1024 + index * ts.staging, first=first)
            out.text(macros("matmul_wgmma_parts.j2").tma_store(c, spec), strip=False)
        out.need("tilex_mma.cuh", "tilex_tma_store.cuh")

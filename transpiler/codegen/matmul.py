"""Emission of `@`: planned tensor-core main loops and products of register tiles, from Jinja templates.

`templates/matmul_mma.j2` (cp.async + ldmatrix + mma.sync) and `templates/matmul_wgmma.j2`
(TMA + mbarriers + wgmma, warp-specialized) hold the main-loop skeletons (`passes/plan_matmul.py`
decides which); this module fills in the operand geometry (tensor names, slice starts, dims,
shared-memory offsets) and the per-shape `wgmma` instruction wrappers, and records the TMA
descriptors the host must pass. `templates/matmul_mma_tile.j2` multiplies register tiles staged
in shared memory (attention's `q @ k.T`, `p @ v`); f32 or odd-shaped tiles use FMAs. In a pipeline
loop whose products run as wgmma (`For.mma`), `templates/matmul_wgmma_tile.j2` issues them: B from
the loop's 128-byte-swizzled ring, A from a swizzled resident tile or from registers.
"""
from __future__ import annotations

from .. import ast as A
from ..exprs import unparse, unparse_stmt, untransposed
from ..layout import Fragment, Layout
from ..passes.infer_memory import stream_source
from ..passes.plan_matmul import SWIZZLE_ELEMS, MatmulPlan, has_tile, mma_stage
from ..spec import TmaMap
from ..targets import MATMUL_PAD
from ..types import DType
from .c import storage

PTX_TYPE = {DType.BF16: "bf16", DType.F16: "f16"}
PRODUCER_REGS = 40
REGISTER_FILE = 65536


def kernel_tma_maps(k) -> tuple[TmaMap, ...]:
    """The TMA descriptors kernel `k`'s wgmma loops read, in parameter order (one per tensor and box)."""
    from ..passes.base import Walker

    found: list[tuple[str, int, tuple]] = []

    class _Find(Walker):
        def on_For(self, s):
            if s.plan is not None and s.plan.strategy == "wgmma":
                p = s.plan
                a = p.products[0].a
                found.append((a.tensor, p.bm, main_box(a, p.bm)))
                for prod in p.products:
                    rows = p.bn if prod.b.kmajor else p.bk
                    found.append((prod.b.tensor, rows, main_box(prod.b, rows)))
            for t in getattr(s, "stream", ()) or ():  # a streamed loop's TMA-filled ring: an N-D map per tile
                if t.tma_box:
                    found.append((stream_source(_assigned(s, t.name)).base.id, t.rows, t.tma_box))

    _Find().walk(k.body)
    unique = list(dict.fromkeys(found))
    return tuple(TmaMap(f"tx_map{i}", t, rows, SWIZZLE_ELEMS, box) for i, (t, rows, box) in enumerate(unique))


def main_box(op, rows: int) -> tuple:
    """The box of a main-loop operand's N-D tensor map, innermost first: () for a rank-2 tensor (its 2-D map
    of [rows, 64] boxes), else [64, rows] on the last two axes and 1 on each batch axis."""
    return (SWIZZLE_ELEMS, rows) + (1,) * len(op.batch) if op.batch else ()


def operand_matrix(em, op) -> dict:
    """C expressions of the row-major matrix a main-loop operand slices: `ptr` (the tensor, or for a batched
    operand the start of its batch's matrix), `nrows`, `ncols`, and `decl`, lines declaring what they use. A
    batch index outside the tensor makes the matrix empty (0 rows) at the tensor's start: its tiles read zeros."""
    dims = em.tensors[op.tensor].type.dims
    r = len(dims)
    nrows, ncols = em.dim(op.tensor, r - 2), em.dim(op.tensor, r - 1)
    if not op.batch:
        return dict(ptr=op.tensor, nrows=nrows, ncols=ncols, decl=[])
    terms, oks = [], []
    for ax, item in enumerate(op.batch):
        i = f"(long long)({em.scalar(item)})"
        terms.append(f"{i} * {em.stride(op.tensor, ax)}")
        oks.append(f"(unsigned long long){i} < (unsigned long long){em.dim(op.tensor, ax)}")
    ok, ptr = em.fresh("tx_zok"), em.fresh("tx_zp")
    S = storage(DType(em.tensors[op.tensor].type.dtype))
    decl = [f"const bool {ok} = {' && '.join(oks)};  // {op.tensor}'s batch index inside the tensor (else zeros)",
            f"const {S}* const {ptr} = {op.tensor} + ({ok} ? {' + '.join(terms)} : 0LL);"]
    return dict(ptr=ptr, nrows=f"({ok} ? (long long){nrows} : 0LL)", ncols=ncols, decl=decl)


def main_coords(em, op, inner: str, outer: str) -> str:
    """The TMA coordinates, innermost first, of a main-loop operand's box at (`inner` column, `outer` row) of
    its matrix: those two for a rank-2 tensor; for a batched one the batch indices after them. An empty tensor
    (a dim of 0, encoded as 1 by the host) gets its boxes wholly before row 0, so nothing is read."""
    if not op.batch:
        return f"{inner}, {outer}"
    dims = em.tensors[op.tensor].type.dims
    empty = [f"{em.dim(op.tensor, ax)} > 0" for ax, d in enumerate(dims) if not isinstance(d, A.IntLit)]
    if empty:
        outer = f"({' && '.join(empty)}) ? (int)({outer}) : -256"
    return ", ".join([inner, outer] + [f"(int)({em.scalar(i)})" for i in reversed(op.batch)])


def _assigned(loop, name: str):
    return next(st.value for st in loop.body.stmts if isinstance(st, A.Assign) and st.name == name)


def wgmma_wrapper(n: int, dt: DType, tnsp_b: bool, parts: int = 1, a_regs: bool = False) -> tuple[str, str]:
    """(name, C++ text) of a device function issuing one wgmma.m64n{n}k16 with both operands in shared memory
    (or, with a_regs, A from four registers of packed pairs: the row fragment of a 64x16 block).

    With parts > 1 the n columns are `parts` products' B tiles side by side (one A): the function takes
    one accumulator array per product, whose registers are the consecutive column blocks of the result.
    """
    name = (f"wgmma_m64n{n}k16_{PTX_TYPE[dt]}{'_rs' if a_regs else ''}_{'mn' if tnsp_b else 'k'}"
            + (f"_x{parts}" if parts > 1 else ""))
    regs = n // 2
    per = regs // parts
    arrays = ["d"] if parts == 1 else [f"d{j}" for j in range(parts)]
    dl = ", ".join(f"%{i}" for i in range(regs))
    outs = []
    for i in range(0, regs, 8):
        outs.append(", ".join(f'"+f"({arrays[j // per]}[{j % per}])' for j in range(i, min(regs, i + 8))))
    out_text = ",\n                 ".join(outs)
    params = ", ".join(f"float (&{a})[{per}]" for a in arrays)
    ptx = PTX_TYPE[dt]
    if a_regs:
        assert parts == 1
        text = (f"__device__ __forceinline__ void tilex_{name}({params}, const unsigned (&a)[4], unsigned long long b) {{\n"
                f"  asm volatile(\"{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 5}, 0;\\n\"\n"
                f"               \" wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{dl}}},\"\n"
                f"               \" {{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, p, 1, 1, "
                f"{1 if tnsp_b else 0};\\n}}\\n\"\n"
                f"               : {out_text}\n"
                f"               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(b), \"n\"(1));\n}}")
        return name, text
    text = (f"__device__ __forceinline__ void tilex_{name}({params}, unsigned long long a, unsigned long long b) {{\n"
            f"  asm volatile(\"{{\\n .reg .pred p;\\n setp.ne.b32 p, %{regs + 2}, 0;\\n\"\n"
            f"               \" wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{dl}}},\"\n"
            f"               \" %{regs}, %{regs + 1}, p, 1, 1, 0, {1 if tnsp_b else 0};\\n}}\\n\"\n"
            f"               : {out_text}\n"
            f"               : \"l\"(a), \"l\"(b), \"n\"(1));\n}}")
    return name, text


def consumer_regs(consumers: int) -> int:
    per = (REGISTER_FILE - PRODUCER_REGS * 128) // consumers
    return min(240, per - per % 8)


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
            brows, bcols, r0, c0 = plan.bn, plan.bk, em.scalar(b.rows), em.scalar(b.k)
        else:
            brows, bcols, r0, c0 = plan.bk, plan.bn, em.scalar(b.k), em.scalar(b.rows)
        bm_ = operand_matrix(em, b)
        decl += bm_["decl"]
        products.append(dict(acc=p.acc, b=b.tensor, ptr=bm_["ptr"], brows=brows, bcols=bcols, r0=r0, c0=c0,
                             nrows=bm_["nrows"], ncols=bm_["ncols"], shift=b.tensor in plan.shifted))
    wm, wn = plan.bm // plan.warps_m, plan.bn // plan.warps_n
    ctx = dict(text=_text(s), stages=plan.stages, bm=plan.bm, bn=plan.bn, bk=plan.bk, S=plan.dtype.ctype,
               warps_m=plan.warps_m, warps_n=plan.warps_n, wm=wm, wn=wn, rm=wm // 16, rn=wn // 8,
               lda=lda, ldb=ldb, a_stage=a_stage, b_stage=b_stage, kmajor_b=kmajor_b,
               threads=plan.consumers, products=products, var=s.var, smem=em.smem, decl=decl,
               start=em.scalar(s.start), stop=em.scalar(s.stop), step=em.scalar(s.step),
               a=dict(tensor=a.tensor, ptr=am["ptr"], rows=em.scalar(a.rows), k=em.scalar(a.k),
                      nrows=am["nrows"], ncols=am["ncols"], shift=a.tensor in plan.shifted),
               shifted=bool(plan.shifted))
    em.helpers.add("tilex_mma.cuh")
    if plan.shifted:
        em.helpers.add("tilex_shift.cuh")
    return ctx


def render_wgmma(em, s, plan: MatmulPlan) -> dict:
    a = plan.products[0].a
    bm, bn, bk = plan.bm, plan.bn, plan.bk
    boxes, products = [], []

    def box(op, rows: int, offset: int, inner: str, outer: str) -> dict:
        """One TMA box of `rows` rows of 64 columns at (inner, outer) of operand `op`'s matrix, `offset` bytes
        into the stage: a 2-D copy, or for a batched operand an N-D one with the batch coordinates."""
        return dict(offset=offset, map=em.tma_map(op.tensor, rows, main_box(op, rows)),
                    coords=main_coords(em, op, inner, outer), fn="tilex_tma_box" if op.batch else "tilex_tma_load_2d")

    def k_boxes(op, rows: int, base: int, chunk: int) -> None:
        """TMA boxes of a k-major [rows, bk] operand tile: one per 64-column chunk, `chunk` bytes apart."""
        for c in range(bk // SWIZZLE_ELEMS):
            boxes.append(box(op, rows, base + c * chunk, _plus(em.scalar(op.k), c * SWIZZLE_ELEMS), em.scalar(op.rows)))
    k_boxes(a, bm, 0, bm * 128)
    offset = bm * bk * 2
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
        em.functions[name] = text
        products.append(dict(acc=", ".join(p.acc for p in plan.products), kmajor=True, offset=offset, fn=name,
                             chunk=chunk))
        offset += group * bn * bk * 2
    for p in ([] if merged else plan.products):
        b = p.b
        if b.kmajor:
            k_boxes(b, bn, offset, bn * 128)
        else:
            for q in range(bn // SWIZZLE_ELEMS):
                boxes.append(box(b, bk, offset + q * bk * 128, _plus(em.scalar(b.rows), q * SWIZZLE_ELEMS), em.scalar(b.k)))
        name, text = wgmma_wrapper(bn, plan.dtype, not b.kmajor)
        em.functions[name] = text
        products.append(dict(acc=p.acc, kmajor=b.kmajor, offset=offset, fn=name, chunk=bn * 128))
        offset += bn * bk * 2
    em.helpers.add("tilex_sm90.cuh")
    if any(op.batch for p in plan.products for op in (p.a, p.b)):
        em.helpers.add("tilex_tma.cuh")  # tilex_tma_box: the N-D copies of batched operands
    return dict(text=_text(s), stages=plan.stages, bm=bm, bn=bn, bk=bk, consumers=plan.consumers,
                stage_bytes=offset, boxes=boxes, products=products, group=group, merged=merged, var=s.var,
                start=em.scalar(s.start), stop=em.scalar(s.stop), step=em.scalar(s.step),
                producer_regs=PRODUCER_REGS, consumer_regs=consumer_regs(plan.consumers))


def _plus(expr: str, c: int) -> str:
    return expr if c == 0 else f"({expr}) + {c}"


def _text(s) -> str:
    """The loop body the template replaces, as source text (the loop header has its own comment)."""
    return "; ".join(unparse_stmt(st) for st in s.body.stmts)


class MatmulEmission:
    """Emitter methods for `@`: planned main loops and products of register tiles (mixed into `emit.Emitter`)."""

    def planned_loop(self, s: A.For) -> None:
        """A tensor-core main loop, from its template (see codegen/matmul.py)."""
        from . import _env
        from .matmul import render_mma, render_wgmma

        plan = s.plan
        if plan.strategy == "wgmma":
            ctx = render_wgmma(self, s, plan)
        else:
            ctx = render_mma(self, s, plan)
        text = _env().get_template(f"matmul_{plan.strategy}.j2").render(barrier=self.barrier, c=ctx, **ctx)
        for line in text.rstrip().splitlines():
            self.emit(line)
        if plan.strategy == "wgmma":
            self.barrier = f'asm volatile("bar.sync 1, {plan.consumers};" ::: "memory");'

    def persistent_loop(self, outer: A.For, inner: A.For) -> None:
        """A top-level tile loop around a wgmma main loop (a persistent kernel): the producer warpgroup
        runs the tile loop too, with only its scalar statements and the loads, so it fills the ring
        with the next tile's operands while the consumers run this tile's epilogue. The ring position
        (`tx_it`) and the mbarrier phases carry over from tile to tile."""
        from . import _env
        from .matmul import render_wgmma

        plan = inner.plan
        c = render_wgmma(self, inner, plan)
        parts = _env().get_template("matmul_wgmma_parts.j2").module

        def lines(text: str) -> None:
            for line in str(text).splitlines():
                self.emit(line)

        start, stop, step = self.scalar(outer.start), self.scalar(outer.stop), self.scalar(outer.step)
        header = f"for (int {outer.var} = {start}; {outer.var} < {stop}; {outer.var} += {step}) {{"
        n_wg = plan.consumers // 128
        self.emit(f"// persistent tile loop around the main loop: {c['text']}")
        self.emit(f"// tensor cores (wgmma, sm_90a): warpgroup {n_wg} loads every tile's operands with TMA into a "
                  f"{plan.stages}-stage ring of 128-byte-swizzled tiles,")
        self.emit(f"// warpgroups 0..{n_wg - 1} each multiply 64 rows of the {plan.bm}x{plan.bn} tile and run the "
                  "epilogue while the ring refills")
        lines(parts.setup(c))
        lines(parts.barriers(c))
        before = outer.body.stmts[: outer.body.stmts.index(inner)]
        self.emit(f"if (threadIdx.x >= {plan.consumers}) {{  // the producer warpgroup")
        self.emit(f"  tilex_setmaxnreg_dec<{c['producer_regs']}>();")
        self.emit(f"  if (threadIdx.x == {plan.consumers}) {{")
        self.depth += 2
        self.emit("int tx_it = 0;  // ring position, across tiles")
        self.emit(header)
        self.depth += 1
        self.declared.append({outer.var})
        for st in before:
            if not (isinstance(st, A.Assign) and not has_tile(st.value)):
                continue  # the accumulators' initial values: consumer registers
            self.stmt(st)
        lines(parts.trips(c))
        self.emit("for (int tx_trip = 0; tx_trip < tx_trips; ++tx_trip) {")
        self.emit("  const int tx_g = tx_it + tx_trip;")
        lines(parts.load_stage(c, "tx_g", "  "))
        self.emit("}")
        self.emit("tx_it += tx_trips;")
        self.declared.pop()
        self.depth -= 1
        self.emit("}")
        self.depth -= 2
        self.emit("  }")
        self.emit("  return;")
        self.emit("}")
        self.emit(f"tilex_setmaxnreg_inc<{c['consumer_regs']}>();")
        self.emit("int tx_it = 0;  // ring position, across tiles")
        self.barrier = f'asm volatile("bar.sync 1, {plan.consumers};" ::: "memory");'
        self.emit(header)
        self.depth += 1
        self.declared.append({outer.var})
        for st in outer.body.stmts:
            if st is not inner:
                self.stmt(st)
                continue
            self.emit(f"// {self.file}:{st.span.line}  {unparse_stmt(st).splitlines()[0]}")
            self.emit("{")
            self.emit("  const int tx_wg = threadIdx.x / 128;")
            lines("  " + str(parts.trips(c)))
            self.emit("  for (int tx_trip = 0; tx_trip < tx_trips; ++tx_trip) {")
            self.emit("    const int tx_g = tx_it + tx_trip;")
            lines(parts.mma_stage(c, "tx_g", "    "))
            self.emit(f"    if (tx_trip > 0 && threadIdx.x % 128 == 0) tilex_mbar_arrive(&tx_empty[(tx_g + {plan.stages - 1}) % {plan.stages}]);")
            self.emit("  }")
            self.emit("  tilex_wgmma_wait<0>();")
            self.emit("  // the last stage goes back to the producer too: the next tile refills it")
            self.emit(f"  if (tx_trips > 0 && threadIdx.x % 128 == 0) tilex_mbar_arrive(&tx_empty[(tx_it + tx_trips - 1) % {plan.stages}]);")
            self.emit("  tx_it += tx_trips;")
            self.emit("}")
        self.declared.pop()
        self.depth -= 1
        self.emit("}")

    def tma_map(self, tensor: str, box_rows: int, box: tuple = ()) -> str:
        return next(m.param for m in self.tma_maps if m.tensor == tensor and m.box_rows == box_rows and m.box == box)

    # ---- matmul (v0: operands staged in shared memory, f32 FMA at the result layout)
    def stage(self, arr: str, layout: Layout, dst: str, ld: int, transpose: bool, S: str,
              swizzle: int | None = None) -> None:
        """Write a register tile into shared memory rows of `ld` elements ([row][col], or [col][row] if
        `transpose`), as 4/8/16-byte vectors when the layout's vector runs along the stored row; with
        `swizzle` (the tile's rows), in 128-byte swizzled rows (tilex_sw128) instead."""
        r, c = (layout.coord(1), layout.coord(0)) if transpose else (layout.coord(0), layout.coord(1))
        at = f"tilex_sw128<{swizzle}>({r}, {c})" if swizzle else f"({r}) * {ld} + ({c})"
        root = layout.root
        along = 0 if transpose else 1
        vec = root.vec if (root.vec_digit is not None and layout.digits and layout.digits[-1] == root.vec_digit
                           and layout.dims[along] == root.rank - 1) else 1
        vbytes = vec * (2 if S in ("tilex_bf16", "tilex_f16") else 4)
        if vec > 1 and vbytes in (4, 8, 16) and (ld * vbytes // vec) % vbytes == 0:
            vt = {4: "unsigned", 8: "uint2", 16: "uint4"}[vbytes]
            self.unrolled(layout.slots, f"{S} tx_v[{vec}]; for (int tx_q = 0; tx_q < {vec}; ++tx_q) tx_v[tx_q] = tilex_io<{S}>::put({arr}[tx_s + tx_q]); "
                                        f"*reinterpret_cast<{vt}*>(&{dst}[{at}]) = *reinterpret_cast<const {vt}*>(tx_v);",
                          step=vec)
            return
        self.unrolled(layout.slots, f"{dst}[{at}] = tilex_io<{S}>::put({arr}[tx_s]);")

    def wgmma_product(self, e: A.BinOp, b: str, init: str | None) -> str:
        """`a @ b` (or `a @ b.T`) in a wgmma loop (see infer_memory): one wgmma.m64n{n}k16 per 16 of K for
        each warpgroup's 64 rows, B from the loop's swizzled stage (`b.T`: K-major; `b`: N-major, the
        transposed-B form), A from a swizzled resident tile (a descriptor) or from registers in the
        product's row fragment (`x.to(bf16)` of an f32 fragment packs x). Issued, committed and waited
        for here: the result is in registers when this returns."""
        from . import _env
        from ..passes.infer_memory import register_a

        (m, kk), (_, n) = e.lhs.ty.shape, e.rhs.ty.shape
        dt_in = e.lhs.ty.dtype
        S = storage(dt_in)
        out_l = e.ty.layout
        kmajor_b = isinstance(e.rhs, A.Attr) and e.rhs.name == "T"
        resident = self.resident.get(e.lhs.id) if isinstance(e.lhs, A.Name) and e.lhs.id in self.swizzled else None
        a_regs = None
        if resident is None:
            a_regs, _ = self.materialize(register_a(e.lhs))  # x.to(bf16): x, packed with one rounding
        fn, text = wgmma_wrapper(n, dt_in, not kmajor_b, a_regs=a_regs is not None)
        self.functions[fn] = text
        self.helpers |= {"tilex_sm90.cuh", "tilex_mma.cuh"}
        src = "registers" if a_regs else "shared memory"
        self.emit(f"// {unparse(e)}: wgmma m64n{n}k16 x {kk // 16} per warpgroup, A from {src}, "
                  f"B {'K' if kmajor_b else 'N'}-major from the ring")
        name = self.fresh("tx_mm")
        self.emit(f"float {name}[{out_l.slots}];")
        self.unrolled(out_l.slots, f"{name}[tx_s] = {init if init is not None else '0.0f'};")
        text = _env().get_template("matmul_wgmma_tile.j2").render(
            S=S, m=m, k=kk, n=n, fn=fn, acc=name, a_regs=a_regs, kmajor_b=kmajor_b,
            a_ptr=f"tilex_smem + {resident[0]}" if resident is not None else None,
            b_ptr=self.streaming[b][0])
        for line in text.rstrip().splitlines():
            self.emit(line)
        return name

    def matmul(self, e: A.BinOp, init: str | None = None) -> str:
        """`a @ b` of register tiles: both staged in shared memory, then mma.sync into a fragment-layout result
        (bf16/f16 operands, see infer_memory.mma_layout) or f32 FMAs at the result's own layout.

        `init` (a C expression of slot `tx_s` in the result's layout) starts the accumulator instead of
        zeros: `c + a @ b` accumulates onto c, so c and the product are never live side by side."""
        rb0 = untransposed(e.rhs)
        if isinstance(rb0, A.Name) and rb0.id in self.wgmma_streams:
            return self.wgmma_product(e, rb0.id, init)
        resident = self.resident.get(e.lhs.id) if isinstance(e.lhs, A.Name) else None
        a, la = self.materialize(e.lhs) if resident is None else (None, e.lhs.ty.layout)
        (m, kk), (_, n) = e.lhs.ty.shape, e.rhs.ty.shape
        dt_in = e.lhs.ty.dtype
        S = storage(dt_in)
        out_l = e.ty.layout
        mma = isinstance(out_l.root, Fragment)
        # b streamed into shared memory by its pipeline loop (rows of the loaded tile: [n][k] for `t.T`)
        transposed = isinstance(e.rhs, A.Attr) and e.rhs.name == "T"
        rb = e.rhs.obj if transposed else e.rhs
        streamed = self.streaming.get(rb.id) if mma and isinstance(rb, A.Name) else None
        if streamed is not None:
            b, lb, kmajor_b = None, None, transposed
            lda, ldb = kk + MATMUL_PAD, streamed[1]
        else:
            b, lb = self.materialize(e.rhs)
            # b goes to shared memory K-contiguous ([n][k], plain ldmatrix) when its registers run along K
            # (a transposed tile, like k.T in attention), else [k][n] (ldmatrix.trans): vector stores either way
            kmajor_b = mma and lb.root.vec_digit is not None and lb.dims[0] == lb.root.rank - 1
            lda, ldb = kk + MATMUL_PAD, (kk if kmajor_b else n) + MATMUL_PAD
        b_offset = m * lda
        # a already in this product's accumulator rows (p of an online softmax): A fragments from registers
        a_regs = (mma and resident is None and isinstance(la.root, Fragment) and la == Layout.of(la.root)
                  and la.root.warps == (out_l.root.warps[0], 1) and out_l.root.warps[1] == 1 and la.root.shape[0] == m)
        how = "multiply with mma.sync" if mma else "accumulate in f32"
        stage_a = resident is None and not a_regs
        if stage_a or streamed is None:
            self.emit(f"// {unparse(e)}: stage [{m}, {kk}] and [{kk}, {n}] {dt_in} tiles in shared memory, {how}")
            self.emit(self.barrier)
            self.emit("{")
            self.depth += 1
            self.emit(f"{S}* tx_As = reinterpret_cast<{S}*>({self.smem});")
            self.emit(f"{S}* tx_Bs = tx_As + {b_offset};")
            if stage_a:
                self.stage(a, la, "tx_As", lda, False, S)
            if streamed is None:
                self.stage(b, lb, "tx_Bs", ldb, kmajor_b, S)
            self.depth -= 1
            self.emit("}")
            self.emit(self.barrier)
        else:
            self.emit(f"// {unparse(e)}: [{m}, {kk}] in registers or kept in shared memory, [{kk}, {n}] streamed "
                      f"into shared memory by the loop: {how}")
        name = self.fresh("tx_mm")
        self.emit(f"float {name}[{out_l.slots}];")
        self.unrolled(out_l.slots, f"{name}[tx_s] = {init if init is not None else '0.0f'};")
        if mma:
            from . import _env

            a_ptr = f"reinterpret_cast<const {S}*>({self.smem})"
            if resident is not None:
                a_ptr = f"reinterpret_cast<const {S}*>(tilex_smem + {resident[0]})"
                lda = resident[1]
            wm_, wn_ = out_l.root.warps
            wm, wn = m // wm_, n // wn_
            self.helpers.add("tilex_mma.cuh")
            text = _env().get_template("matmul_mma_tile.j2").render(
                S=S, m=m, k=kk, lda=lda, ldb=ldb, warps_n=wn_, wm=wm, wn=wn, rm=wm // 16, rn=wn // 8, acc=name,
                kmajor_b=kmajor_b, a_regs=a if a_regs else None, a_blocks=kk // 8, a_ptr=a_ptr,
                b_ptr=(f"reinterpret_cast<const {S}*>({streamed[0]})" if streamed is not None
                       else f"reinterpret_cast<const {S}*>({self.smem}) + {b_offset}"))
            for line in text.rstrip().splitlines():
                self.emit(line)
            return name
        self.emit("{")
        self.depth += 1
        self.emit(f"const {S}* tx_As = reinterpret_cast<const {S}*>({self.smem});")
        self.emit(f"const {S}* tx_Bs = tx_As + {b_offset};")
        self.emit(f"for (int tx_k = 0; tx_k < {kk}; ++tx_k) {{")
        self.depth += 1
        self.unrolled(out_l.slots, f"{name}[tx_s] += (float)tilex_io<{S}>::get(tx_As[({out_l.coord(0)}) * {lda} + tx_k]) * "
                                   f"(float)tilex_io<{S}>::get(tx_Bs[tx_k * {ldb} + ({out_l.coord(1)})]);")
        self.depth -= 1
        self.emit("}")
        self.depth -= 1
        self.emit("}")
        return name

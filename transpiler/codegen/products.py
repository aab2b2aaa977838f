"""`@` of register tiles: staged in shared memory, then mma.sync fragments, wgmma from a pipeline loop's ring, or FMAs.

`templates/matmul_mma_tile.j2` multiplies register tiles staged in shared memory (attention's `q @ k.T`,
`p @ v`); f32 or odd-shaped tiles use FMAs. In a pipeline loop whose products run as wgmma (`For.mma`),
`templates/matmul_wgmma_tile.j2` issues them: B from the loop's 128-byte-swizzled ring, A from a swizzled
resident tile or from registers. (The planned main loops are codegen/matmul.py's.)
"""
from __future__ import annotations

from .. import ast as A
from ..exprs import unparse, untransposed
from ..layout import Fragment, Layout
from ..passes.assign_layouts import register_a
from ..targets import MATMUL_PAD
from ..types import DType
from .c import storage
from .context import KernelFacts, Scope
from .env import template
from .matmul import wgmma_wrapper
from .writer import Writer


class ProductEmitter:
    """Products of register tiles (`matmul`, `wgmma_product`) and the staging of a register tile into shared
    memory (`stage`, also used for resident tiles). Operands come from `expr` (an ExprEmitter); the tiles a
    pipeline loop streams and the barrier from the scope."""

    def __init__(self, facts: KernelFacts, out: Writer, scope: Scope, expr):
        self.facts, self.out, self.scope, self.expr = facts, out, scope, expr

    def stage(self, arr: str, layout: Layout, dst: str, ld: int, transpose: bool, dt: DType,
              swizzle: int | None = None) -> None:
        """Write a register tile into shared memory rows of `ld` elements ([row][col], or [col][row] if
        `transpose`), as 4/8/16-byte vectors when the layout's vector runs along the stored row; with
        `swizzle` (the tile's rows), in 128-byte swizzled rows (tilex_sw128) instead."""
        out, S = self.out, storage(dt)
        r, c = (layout.coord(1), layout.coord(0)) if transpose else (layout.coord(0), layout.coord(1))
        at = f"tilex_sw128<{swizzle}>({r}, {c})" if swizzle else f"({r}) * {ld} + ({c})"
        root = layout.root
        along = 0 if transpose else 1
        vec = root.vec if (root.vec_digit is not None and layout.digits and layout.digits[-1] == root.vec_digit
                           and layout.dims[along] == root.rank - 1) else 1
        vbytes = vec * dt.itemsize
        if vec > 1 and vbytes in (4, 8, 16) and (ld * vbytes // vec) % vbytes == 0:
            vt = {4: "unsigned", 8: "uint2", 16: "uint4"}[vbytes]
            out.unrolled(layout.slots, f"{S} tx_v[{vec}]; for (int tx_q = 0; tx_q < {vec}; ++tx_q) tx_v[tx_q] = tilex_io<{S}>::put({arr}[tx_s + tx_q]); "
                                       f"*reinterpret_cast<{vt}*>(&{dst}[{at}]) = *reinterpret_cast<const {vt}*>(tx_v);",
                         step=vec)
            return
        out.unrolled(layout.slots, f"{dst}[{at}] = tilex_io<{S}>::put({arr}[tx_s]);")

    def wgmma_product(self, e: A.BinOp, b: str, init: str | None) -> str:
        """`a @ b` (or `a @ b.T`) in a wgmma loop (see passes/choose_mma.py): one wgmma.m64n{n}k16 per 16 of K for
        each warpgroup's 64 rows, B from the loop's swizzled stage (`b.T`: K-major; `b`: N-major, the
        transposed-B form), A from a swizzled resident tile (a descriptor) or from registers in the
        product's row fragment (`x.to(bf16)` of an f32 fragment packs x). Issued, committed and waited
        for here: the result is in registers when this returns."""
        out = self.out
        (m, kk), (_, n) = e.lhs.ty.shape, e.rhs.ty.shape
        dt_in = e.lhs.ty.dtype
        S = storage(dt_in)
        out_l = e.ty.layout
        kmajor_b = isinstance(e.rhs, A.Attr) and e.rhs.name == "T"
        resident = self.facts.resident.get(e.lhs.id) if isinstance(e.lhs, A.Name) and e.lhs.id in self.facts.swizzled else None
        a_ptr = f"tilex_smem + {resident[0]}" if resident is not None else None
        if isinstance(e.lhs, A.Name) and e.lhs.id in self.scope.wgmma_streams:  # A from this iteration's stage
            a_ptr = self.scope.streaming[e.lhs.id][0]
        a_regs = None
        if a_ptr is None:
            a_regs, _ = self.expr.materialize(register_a(e.lhs))  # x.to(bf16): x, packed with one rounding
        fn, text = wgmma_wrapper(n, dt_in, not kmajor_b, a_regs=a_regs is not None)
        out.functions[fn] = text
        out.need("tilex_sm90.cuh", "tilex_mma.cuh")
        src = "registers" if a_regs else "shared memory" if resident is not None else "the ring"
        out.emit(f"// {unparse(e)}: wgmma m64n{n}k16 x {kk // 16} per warpgroup, A from {src}, "
                  f"B {'K' if kmajor_b else 'N'}-major from the ring")
        name = out.fresh("tx_mm")
        out.emit(f"float {name}[{out_l.slots}];")
        out.unrolled(out_l.slots, f"{name}[tx_s] = {init if init is not None else '0.0f'};")
        text = template("matmul_wgmma_tile.j2").render(
            S=S, m=m, k=kk, n=n, fn=fn, acc=name, a_regs=a_regs, kmajor_b=kmajor_b,
            a_ptr=a_ptr, b_ptr=self.scope.streaming[b][0])
        out.text(text)
        return name

    def matmul(self, e: A.BinOp, init: str | None = None) -> str:
        """`a @ b` of register tiles: both staged in shared memory, then mma.sync into a fragment-layout result
        (bf16/f16 operands, see assign_layouts.mma_layout) or f32 FMAs at the result's own layout.

        `init` (a C expression of slot `tx_s` in the result's layout) starts the accumulator instead of
        zeros: `c + a @ b` accumulates onto c, so c and the product are never live side by side."""
        out = self.out
        rb0 = untransposed(e.rhs)
        if isinstance(rb0, A.Name) and rb0.id in self.scope.wgmma_streams:
            return self.wgmma_product(e, rb0.id, init)
        resident = self.facts.resident.get(e.lhs.id) if isinstance(e.lhs, A.Name) else None
        a, la = self.expr.materialize(e.lhs) if resident is None else (None, e.lhs.ty.layout)
        (m, kk), (_, n) = e.lhs.ty.shape, e.rhs.ty.shape
        dt_in = e.lhs.ty.dtype
        S = storage(dt_in)
        out_l = e.ty.layout
        mma = isinstance(out_l.root, Fragment)
        # b streamed into shared memory by its pipeline loop (rows of the loaded tile: [n][k] for `t.T`)
        transposed = isinstance(e.rhs, A.Attr) and e.rhs.name == "T"
        rb = e.rhs.obj if transposed else e.rhs
        streamed = self.scope.streaming.get(rb.id) if mma and isinstance(rb, A.Name) else None
        if streamed is not None:
            b, lb, kmajor_b = None, None, transposed
            lda, ldb = kk + MATMUL_PAD, streamed[1]
        else:
            b, lb = self.expr.materialize(e.rhs)
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
            out.emit(f"// {unparse(e)}: stage [{m}, {kk}] and [{kk}, {n}] {dt_in} tiles in shared memory, {how}")
            out.emit(self.scope.barrier)
            with out.block():
                out.emit(f"{S}* tx_As = reinterpret_cast<{S}*>({self.facts.smem});")
                out.emit(f"{S}* tx_Bs = tx_As + {b_offset};")
                if stage_a:
                    self.stage(a, la, "tx_As", lda, False, dt_in)
                if streamed is None:
                    self.stage(b, lb, "tx_Bs", ldb, kmajor_b, dt_in)
            out.emit(self.scope.barrier)
        else:
            out.emit(f"// {unparse(e)}: [{m}, {kk}] in registers or kept in shared memory, [{kk}, {n}] streamed "
                      f"into shared memory by the loop: {how}")
        name = out.fresh("tx_mm")
        out.emit(f"float {name}[{out_l.slots}];")
        out.unrolled(out_l.slots, f"{name}[tx_s] = {init if init is not None else '0.0f'};")
        if mma:
            a_ptr = f"reinterpret_cast<const {S}*>({self.facts.smem})"
            if resident is not None:
                a_ptr = f"reinterpret_cast<const {S}*>(tilex_smem + {resident[0]})"
                lda = resident[1]
            wm_, wn_ = out_l.root.warps
            wm, wn = m // wm_, n // wn_
            out.need("tilex_mma.cuh")
            text = template("matmul_mma_tile.j2").render(
                S=S, m=m, k=kk, lda=lda, ldb=ldb, warps_n=wn_, wm=wm, wn=wn, rm=wm // 16, rn=wn // 8, acc=name,
                kmajor_b=kmajor_b, a_regs=a if a_regs else None, a_blocks=kk // 8, a_ptr=a_ptr,
                b_ptr=(f"reinterpret_cast<const {S}*>({streamed[0]})" if streamed is not None
                       else f"reinterpret_cast<const {S}*>({self.facts.smem}) + {b_offset}"))
            out.text(text)
            return name
        with out.block():  # f32 (or odd-shaped) tiles: FMAs at the result's layout
            out.emit(f"const {S}* tx_As = reinterpret_cast<const {S}*>({self.facts.smem});")
            out.emit(f"const {S}* tx_Bs = tx_As + {b_offset};")
            with out.block(f"for (int tx_k = 0; tx_k < {kk}; ++tx_k) {{"):
                out.unrolled(out_l.slots, f"{name}[tx_s] += (float)tilex_io<{S}>::get(tx_As[({out_l.coord(0)}) * {lda} + tx_k]) * "
                                          f"(float)tilex_io<{S}>::get(tx_Bs[tx_k * {ldb} + ({out_l.coord(1)})]);")
        return name

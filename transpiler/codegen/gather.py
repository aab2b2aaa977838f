"""Gathered streamed tiles: rows picked by index tiles (a block table), copied by cp.async 16 bytes at a time."""
from __future__ import annotations

from .. import ast as A
from ..exprs import unparse
from ..types import DType
from .c import storage
from .context import KernelFacts
from .env import macros
from .writer import Writer


class GatherEmitter:
    """`gather_copy` of the gathered tiles of a streamed loop (one copy per `gather_key`); index tiles and
    scalars from `expr` (an ExprEmitter), subscripts from `access` (an AccessEmitter)."""

    def __init__(self, facts: KernelFacts, out: Writer, expr, access):
        self.facts, self.out, self.expr, self.access = facts, out, expr, access

    def gather_key(self, t) -> tuple:
        """Gathered tiles with equal keys read the same rows at the same offsets (the same index
        expressions into tensors of the same dims and element type, copied in the same layout):
        one copy computes each row's indices and offset once for all of them."""
        name, axes = self.access.index_axes(t.gather)
        return (tuple(unparse(it) for _, it in axes), tuple(self.facts.dim(name, ax) for ax in range(len(axes))),
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
        out = self.out
        t0 = ts[0]
        e = t0.gather
        name, axes = self.access.index_axes(e)
        names = [self.access.index_axes(t.gather)[0] for t in ts]
        layout = t0.copy_layout
        rows = layout.axes(0)
        S = storage(e.ty.dtype)
        out.need("tilex_mma.cuh", "tilex_gather.cuh")
        vec = layout.root.vec
        assert vec == 8 and layout.digits[-1] == layout.root.vec_digit, "a gathered copy moves 16-byte chunks"
        last = len(self.facts.tensors[name].type.dims) - 1
        ncols = self.facts.dim(name, last)
        with out.block("{  // " + ", ".join(t.name for t in ts) + ": gathered rows, indices and offset once per row" + (" for all" if len(ts) > 1 else "")):
            row_lines, row_oks, row_terms, uni_oks, uni_terms = [], [], [], [], []
            wide, small = [], []  # the whole path's row terms (in bytes), and its condition that they fit
            size = e.ty.dtype.itemsize
            c0 = "0"
            # the index of the first index tile counts as 0 unless the row is inside the tensor, each other one
            # unless inside its axis (often provably, so no select): a row outside has an address inside
            sel = lambda iv, own: f"tx_ok ? {iv} : 0" if not wide else f"{own} ? {iv} : 0"  # noqa: E731
            for ax, item in axes:
                iv = f"tx_i{ax}"
                dim, st = self.facts.dim(name, ax), self.facts.stride(name, ax)
                if isinstance(item, A.Slice):
                    c0 = self.expr.scalar(item.start) if item.start is not None else "0"
                elif item.ty.shape:  # a row's index: the index tile's loads are emitted here, once for the group
                    val = self.expr.tile(item, rows)
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
                    out.emit(f"const long long {iv} = (long long)({self.expr.scalar(item)});")
                    uni_oks.append(f"(unsigned long long){iv} < (unsigned long long){dim}")
                    uni_terms.append(f"{iv} * {st}")
            ok = " && ".join((["tx_uok"] if uni_oks else []) + row_oks)
            off = " + ".join(row_terms + (["tx_u"] if uni_oks else []))
            addrs = [f"reinterpret_cast<unsigned long long>({n})" for n in names]
            smem = lambda t, dst: (f"reinterpret_cast<{S}*>({dst}) + ({layout.coord(0, 'tx_s')}) * {t.ld} "  # noqa: E731
                                   f"+ ({layout.coord(1, 'tx_s')})")
            row = " ".join(row_lines) + f" const bool tx_ok = {ok};"
            col = f"const long long tx_col = tx_c0 + ({layout.coord(1, 'tx_s')});"
            fast = [f"tilex_cp_async16_or_zero({smem(t, d)}, reinterpret_cast<const void*>(tx_a{f' + tx_d{k}' if k else ''}), tx_ok);"
                    for k, (t, d) in enumerate(zip(ts, dsts))]
            acc = f"tx_a0 + (unsigned long long)({layout.coord(1, 'tx_s')}) * {size}"
            for w in reversed(wide):
                acc = w(acc)
            slow = [f"tilex_gather_chunk16<{S}>({smem(t, d)}, {n}, tx_ok ? {off} + tx_col : 0, tx_ok, tx_col, (long long){ncols});"
                    for t, d, n in zip(ts, dsts, names)]
            out.text(macros("gather.j2").copy_rows(dict(
                c0=c0, uni_oks=uni_oks, uni_terms=uni_terms, cols=t0.cols, ncols=ncols, addrs=addrs, small=small,
                size=size, slots=layout.slots, vec=vec,
                fast=f"{row} const unsigned long long tx_a = {acc}; " + " ".join(fast), slow=f"{row} {col} " + " ".join(slow))))

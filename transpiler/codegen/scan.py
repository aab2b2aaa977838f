"""Scans, sorts and top-k along an axis of a register tile: exchange networks over the axis's coordinate bits.

Every step pairs the element at coordinate i with the one at i ^ 2^b; `layout_bits.axis_bits` says where
that partner is: another slot of the same thread (a register), another lane (`tilex_shfl_xor`, issued by
every lane), or another warp (all threads write their slots to shared memory at `[slot * T + tid]`, a
barrier, each reads its partner thread's, a barrier before the next write). A scan is the butterfly
(each element adds its partner block's total when the partner is below it: log2(n) steps); a sort is
Batcher's bitonic network on (value, position) pairs (log2(n) (log2(n) + 1) / 2 steps), compared by
`tilex_sort_before` (templates/tilex_scan.cuh: NaN largest, ties by position): a total order, so the
result is the stable sort the interpreter computes. Top-k sorts, then reads the first K along the axis
out of shared memory at the result's layout.
"""
from __future__ import annotations

from .. import ast as A
from ..builtins import scan_args
from ..layout import Layout
from ..layout_bits import AxisBit, axis_bits
from ..types import DType
from .c import reg
from .context import KernelFacts, Scope
from .writer import Writer

_IDENT = {  # the identity of an exclusive scan per combine and register type
    ("cumsum", "float"): "0.0f", ("cumsum", "double"): "0.0", ("cumsum", "int"): "0", ("cumsum", "long long"): "0LL",
    ("cummax", "float"): "__int_as_float(0xff800000)", ("cummax", "double"): "-__longlong_as_double(0x7ff0000000000000LL)",
    ("cummax", "int"): "(-2147483647 - 1)", ("cummax", "long long"): "(-9223372036854775807LL - 1)",
    ("cummin", "float"): "__int_as_float(0x7f800000)", ("cummin", "double"): "__longlong_as_double(0x7ff0000000000000LL)",
    ("cummin", "int"): "2147483647", ("cummin", "long long"): "9223372036854775807LL",
}


def _identity(func: str, t: str, dt: DType) -> str:
    """The identity of an exclusive scan of `dt` values held in registers of C type `t`: a narrow int's cummax/cummin
    starts from the end of its own range (-128 for i8, as the interpreter's np.iinfo), not of the int it computes in."""
    if func != "cumsum" and dt.is_narrow_int:
        return str(dt.int_range[0 if func == "cummax" else 1])
    return _IDENT[(func, t)]


def _combine(func: str, t: str, a: str, b: str) -> str:
    if func == "cumsum":
        return f"tilex_wadd<{t}>({a}, {b})" if t in ("int", "long long") else f"{a} + {b}"  # ints wrap
    op = func[3:]
    if t in ("float", "double"):
        return f"f{op}{'f' if t == 'float' else ''}({a}, {b})"
    return f"tilex_i{op}<{t}>({a}, {b})"


def _runs(bits, j: str):
    """(C condition on the coordinate bit `j`, its first AxisBit, the xor mask as C) per run of bits one exchange
    serves: each slot bit alone (its registers are fixed), consecutive lane (or warp) bits whose masks grow
    with the bit together (mask = j * m0 / v0)."""
    runs: list[list] = []
    for b in bits:
        last = runs[-1] if runs else None
        if (last and b.where != "slot" and last[0].where == b.where and last[-1].value * 2 == b.value
                and last[-1].mask * 2 == b.mask):
            last.append(b)
        else:
            runs.append([b])
    out = []
    for run in runs:
        lo, hi = run[0], run[-1]
        cond = f"{j} == {lo.value}" if lo is hi else f"{j} >= {lo.value} && {j} <= {hi.value}"
        if lo.where == "slot":
            mask = None
        elif lo.mask >= lo.value:
            mask = f"{j} * {lo.mask // lo.value}" if lo.mask > lo.value else j
        else:
            mask = f"{j} / {lo.value // lo.mask}"
        out.append((cond, lo, mask))
    return out


class ScanEmitter:
    """cumsum/cummax/cummin, sort/argsort and topk/argtopk of register tiles; the operand from `expr`."""

    def __init__(self, facts: KernelFacts, out: Writer, scope: Scope, expr):
        self.facts, self.out, self.scope, self.expr = facts, out, scope, expr

    def emit(self, e: A.Call) -> tuple[str, Layout]:
        """The array holding the call's result and its layout."""
        out = self.out
        out.need("tilex_reduce.cuh", "tilex_math.cuh", "tilex_scan.cuh")
        x = e.args[0]
        src, have = self.expr.materialize(x)
        sa = scan_args(e)
        bits = axis_bits(have, sa.axis)
        if e.func.startswith("cum"):
            return self._scan(e, src, have, bits, sa), have
        vals, idx = self._sort(e, src, have, bits, sa)
        if sa.k is None:
            return (idx if sa.indices else vals), have
        return self._first_k(e, vals, idx, have, sa)

    # ---- the exchange of one coordinate bit
    def _exchange(self, arrays: list[tuple[str, str]], layout: Layout, bit: AxisBit, names=None, mask=None) -> list[str]:
        """Partner copies of `arrays` ((name, C type), each `layout.slots` long) across coordinate bit `bit`:
        into `names` (declared here when None); `mask` a C expression for the lane or thread xor (a run of bits)."""
        out, n = self.out, layout.slots
        if names is None:
            names = [out.fresh("tx_xp") for _ in arrays]
            for p, (_, t) in zip(names, arrays):
                out.emit(f"{t} {p}[{n}];")
        m = mask or str(bit.mask)
        if bit.where == "slot":
            out.unrolled(n, " ".join(f"{p}[tx_s] = {a}[tx_s ^ {bit.mask}];" for p, (a, _) in zip(names, arrays)))
        elif bit.where == "lane":
            out.unrolled(n, " ".join(f"{p}[tx_s] = tilex_shfl_xor({a}[tx_s], {m});" for p, (a, _) in zip(names, arrays)))
        else:
            T = self.facts.T
            out.emit(f"// exchange with the thread threadIdx.x ^ {m} (another warp) through shared memory")
            out.emit(self.scope.barrier)
            with out.block():
                off, ptrs = 0, []
                for a, t in arrays:
                    ptr = out.fresh("tx_xs")
                    out.emit(f"{t}* {ptr} = reinterpret_cast<{t}*>({self.facts.smem} + {off});")
                    ptrs.append(ptr)
                    off += T * n * (8 if t in ("double", "long long") else 4)
                out.unrolled(n, " ".join(f"{q}[tx_s * {T} + threadIdx.x] = {a}[tx_s];" for q, (a, _) in zip(ptrs, arrays)))
                out.emit(self.scope.barrier)
                out.unrolled(n, " ".join(f"{p}[tx_s] = {q}[tx_s * {T} + (threadIdx.x ^ {m})];"
                                         for p, q in zip(names, ptrs)))
        return names

    # ---- scans: the butterfly
    def _scan(self, e: A.Call, src: str, have: Layout, bits, sa) -> str:
        out, n = self.out, have.slots
        func = e.func
        t = reg(e.ty.dtype.compute)
        cdt = e.ty.dtype.compute if func == "cumsum" else e.args[0].ty.dtype.compute
        tot, pre = out.fresh("tx_st"), out.fresh("tx_sp")
        out.emit(f"// {func} along axis {sa.axis}: a butterfly over {len(bits)} coordinate bits")
        out.emit(f"{t} {tot}[{n}]; {t} {pre}[{n}];")
        init = _identity(func, t, e.args[0].ty.dtype) if sa.flag else f"{tot}[tx_s]"
        out.unrolled(n, f"{tot}[tx_s] = {self.expr.cast(f'{src}[tx_s]', e.args[0].ty.dtype, cdt)}; {pre}[tx_s] = {init};")
        for bit in bits:
            (par,) = self._exchange([(tot, t)], have, bit)
            up = f"(({have.coord(sa.axis, 'tx_s')}) & {bit.value}) != 0"
            out.unrolled(n, f"if ({up}) {pre}[tx_s] = {_combine(func, t, f'{par}[tx_s]', f'{pre}[tx_s]')}; "
                            f"{tot}[tx_s] = {_combine(func, t, f'{tot}[tx_s]', f'{par}[tx_s]')};")
        return pre  # (a narrow float's cummax/cummin holds its own values: nothing to round)

    # ---- sorts: the bitonic network on (value, position)
    def _sort(self, e: A.Call, src: str, have: Layout, bits, sa) -> tuple[str, str]:
        out, n = self.out, have.slots
        xdt = e.args[0].ty.dtype
        t = reg(xdt.compute)
        v, ix = out.fresh("tx_sv"), out.fresh("tx_si")
        L = 1 << len(bits)
        coord = have.coord(sa.axis, "tx_s")
        out.emit(f"// {e.func} along axis {sa.axis}: a bitonic network of {L} elements, "
                 f"{'descending' if sa.flag else 'ascending'}, ties by position")
        out.emit(f"{t} {v}[{n}]; int {ix}[{n}];")
        out.unrolled(n, f"{v}[tx_s] = {self.expr.cast(f'{src}[tx_s]', xdt, xdt.compute)}; {ix}[tx_s] = {coord};")
        desc = "true" if sa.flag else "false"
        if L == 1:
            return v, ix
        pv, pi = out.fresh("tx_xp"), out.fresh("tx_xp")
        out.emit(f"{t} {pv}[{n}]; int {pi}[{n}];")
        # the stages run as loops (one copy of each kind of step, chosen by the uniform bit j), not unrolled: a
        # sort of 4096 is 78 stages, too much straight-line code for ptxas
        step = lambda fwd: self._step(v, ix, pv, pi, t, have, bits, coord, desc, fwd)  # noqa: E731
        K = sa.k if sa.k is not None else L
        out.emit("#pragma unroll 1")
        with out.block(f"for (int tx_k = 2; tx_k <= {K}; tx_k <<= 1) {{"):  # blocks of K sorted, alternating
            out.emit("#pragma unroll 1")
            with out.block("for (int tx_j = tx_k >> 1; tx_j > 0; tx_j >>= 1) {"):
                step(f"((({coord}) & tx_k) == 0)")
        if K < L:
            # top-K: the survivors of round r are the K-blocks at coordinates c % r < K, sorted forward where
            # c & r == 0; the lower of two (one forward, one reversed) keeps the better of each pair (the
            # K best of both, a bitonic sequence) and sorts it for the next round: 1 + log2(K) steps a round
            out.emit(f"// top {K}: {len(bits) - K.bit_length() + 1} rounds keep the better half")
            out.emit("#pragma unroll 1")
            with out.block(f"for (int tx_r = {K}; tx_r < {L}; tx_r <<= 1) {{"):
                with out.block():
                    out.emit("const int tx_j = tx_r;")
                    step("true")
                out.emit("#pragma unroll 1")
                with out.block(f"for (int tx_j = {K // 2}; tx_j > 0; tx_j >>= 1) {{"):
                    step(f"((({coord}) & (tx_r << 1)) == 0)")
        return v, ix

    def _step(self, v, ix, pv, pi, t, have: Layout, bits, coord: str, desc: str, fwd: str) -> None:
        """One compare-exchange step of the network on the bit `tx_j` (uniform): the lower element of each pair
        keeps the first in the order where `fwd` (a C condition on the slot's coordinate), else the second. A
        bit held in the thread's slots compares each pair of slots once (the lower slot has the lower
        coordinate); a lane or warp bit exchanges with the partner thread, and each side keeps its element."""
        out, n = self.out, have.slots
        for i, (cond, bit, mask) in enumerate(_runs(bits, "tx_j")):
            with out.block(("if" if i == 0 else "} else if") + f" ({cond}) {{", tail=None):
                if bit.where == "slot":
                    m = bit.mask
                    out.unrolled(n, f"if ((tx_s & {m}) == 0) tilex_bitonic_pair<{desc}>({v}[tx_s], {ix}[tx_s], "
                                    f"{v}[tx_s | {m}], {ix}[tx_s | {m}], {fwd});")
                    continue
                self._exchange([(v, t), (ix, "int")], have, bit, [pv, pi], mask)
                first = f"((({coord}) & tx_j) == 0) == {fwd}"
                out.unrolled(n, f"tilex_bitonic<{desc}>({v}[tx_s], {ix}[tx_s], {pv}[tx_s], {pi}[tx_s], {first});")
        out.emit("}")

    def _first_k(self, e: A.Call, vals: str, idx: str, have: Layout, sa) -> tuple[str, Layout]:
        """The first K along the axis of the sorted (vals, idx), read at the call's layout through shared memory."""
        self.out.emit(f"// the first {sa.k} along axis {sa.axis} of the sorted tile")
        dt = DType.I32 if sa.indices else e.args[0].ty.dtype.compute
        return self.expr.convert(idx if sa.indices else vals, have, e.ty.layout, dt), e.ty.layout

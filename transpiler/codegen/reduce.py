"""Reductions of register tiles: within a thread, across a warp (shuffles), across warps (shared memory)."""
from __future__ import annotations

from .. import ast as A
from ..builtins import FUNCTIONS, BuiltinKind
from ..layout import Layout, flat_index, reduction_plan
from ..types import numel
from .c import reg
from .context import KernelFacts, Scope
from .scan import ScanEmitter
from .writer import Writer


class ReductionEmitter:
    """sum/mean/max/min/argmax/argmin of register tiles; the operand from `expr` (an ExprEmitter), the
    cross-warp combine through the scratch shared memory with the scope's barrier."""

    def __init__(self, facts: KernelFacts, out: Writer, scope: Scope, expr):
        self.facts, self.out, self.scope, self.expr = facts, out, scope, expr
        self.scans = ScanEmitter(facts, out, scope, expr)

    def scan(self, e: A.Call) -> tuple[str, Layout]:
        """A scan, sort or top-k along an axis (codegen/scan.py): its result array and layout."""
        return self.scans.emit(e)

    def reduction(self, e: A.Call) -> tuple[str, Layout | None]:
        out = self.out
        out.need("tilex_reduce.cuh")
        out.need("tilex_math.cuh")  # integer combines: tilex_wadd, tilex_imax/imin
        x = e.args[0]
        src, have = self.expr.materialize(x)
        func = e.func
        arg = FUNCTIONS[func].kind is BuiltinKind.ARGREDUCE
        dt = e.ty.dtype
        acc_t = reg(x.ty.dtype.compute)
        if func in ("sum", "mean"):
            acc_t = reg(dt)
        axis_kw = e.kwarg("axis")
        keep = bool(e.kwarg("keepdims").value) if e.kwarg("keepdims") is not None else False
        axes = [axis_kw.value] if axis_kw is not None else list(range(len(x.ty.shape)))
        count = numel(tuple(x.ty.shape[a] for a in axes))
        ident = _identity(func, acc_t)
        cur, cur_idx, layout = src, None, have
        first = True
        for axis in sorted(axes, reverse=True):
            out_l = layout.reduce(axis, keepdims=keep)
            name = out.fresh("tx_rd")
            out.emit(f"{acc_t} {name}[{out_l.slots}];")
            out.unrolled(out_l.slots, f"{name}[tx_s] = {ident};")
            idx = None
            if arg:
                idx = out.fresh("tx_ri")
                out.emit(f"int {idx}[{out_l.slots}];")
                out.unrolled(out_l.slots, f"{idx}[tx_s] = 0x7fffffff;")
            m = out_l.slot_map(layout, "tx_s")
            val = f"({acc_t}){cur}[tx_s]" if not (func in ("sum", "mean") and first) else self.expr.cast(f"{cur}[tx_s]", x.ty.dtype, dt)
            if arg:
                pos = layout.coord(axis, "tx_s") if first else f"{cur_idx}[tx_s]"
                out.unrolled(layout.slots, f"tilex_{func}_combine({name}[{m}], {idx}[{m}], {val}, {pos});")
            else:
                out.unrolled(layout.slots, f"{name}[{m}] = {_combine(func, acc_t, f'{name}[{m}]', val)};")
            self.cross_thread(func, acc_t, name, idx, layout, axis, out_l)
            cur, cur_idx, layout, first = name, idx, out_l, False
        result = cur_idx if arg else cur
        if func == "mean":
            out.unrolled(layout.slots, f"{cur}[tx_s] = {cur}[tx_s] / ({acc_t}){count};")
        if not e.ty.shape:
            red = out.fresh("tx_red")
            out.emit(f"const {reg(dt)} {red} = {result}[0];")
            return red, None
        return result, layout

    def cross_thread(self, func, acc_t, name, idx, layout: Layout, axis: int, out_l: Layout) -> None:
        out = self.out
        plan = reduction_plan(layout, axis)
        for off in plan.shuffles:
            if idx is None:
                out.unrolled(out_l.slots, f"{name}[tx_s] = {_combine(func, acc_t, f'{name}[tx_s]', f'tilex_shfl_xor({name}[tx_s], {off})')};")
            else:
                out.unrolled(out_l.slots, f"tilex_{func}_combine({name}[tx_s], {idx}[tx_s], tilex_shfl_xor({name}[tx_s], {off}), tilex_shfl_xor({idx}[tx_s], {off}));")
        groups = plan.groups
        if groups == 1:
            return
        out.emit(f"// combine {groups} warps' partial {func}s through shared memory")
        out.emit(self.scope.barrier)
        with out.block():
            self._combine_warps(func, acc_t, name, idx, plan, groups, out_l)

    def _combine_warps(self, func, acc_t, name, idx, plan, groups: int, out_l: Layout) -> None:
        out = self.out
        outn = max(1, numel(out_l.shape))
        flat = flat_index(out_l, out_l.shape)
        out.emit(f"{acc_t}* tx_sc = reinterpret_cast<{acc_t}*>({self.facts.smem});")
        pi = f"reinterpret_cast<int*>({self.facts.smem} + {groups * outn * 4 if acc_t != 'double' and acc_t != 'long long' else groups * outn * 8})"
        if idx is not None:
            out.emit(f"int* tx_si = {pi};")
        out.emit(f"const int tx_g = {plan.group_expr};")
        write = f"tx_sc[tx_g * {outn} + {flat}] = {name}[tx_s];" + (f" tx_si[tx_g * {outn} + {flat}] = {idx}[tx_s];" if idx else "")
        with out.block(f"if ({plan.writer}) {{"):
            out.unrolled(out_l.slots, write)
        out.emit(self.scope.barrier)
        if idx is None:
            body = (f"{acc_t} tx_a = tx_sc[{flat}]; for (int tx_q = 1; tx_q < {groups}; ++tx_q) tx_a = {_combine(func, acc_t, 'tx_a', f'tx_sc[tx_q * {outn} + {flat}]')}; "
                    f"{name}[tx_s] = tx_a;")
        else:
            body = (f"{acc_t} tx_a = tx_sc[{flat}]; int tx_ai = tx_si[{flat}]; for (int tx_q = 1; tx_q < {groups}; ++tx_q) tilex_{func}_combine(tx_a, tx_ai, tx_sc[tx_q * {outn} + {flat}], tx_si[tx_q * {outn} + {flat}]); "
                    f"{name}[tx_s] = tx_a; {idx}[tx_s] = tx_ai;")
        out.unrolled(out_l.slots, body)


def _identity(func: str, t: str) -> str:
    if func in ("sum", "mean"):
        return "0"
    if func in ("max", "argmax"):
        return {"float": "__int_as_float(0xff800000)", "double": "-__longlong_as_double(0x7ff0000000000000LL)",
                "int": "(-2147483647 - 1)", "long long": "(-9223372036854775807LL - 1)", "bool": "false"}[t]
    return {"float": "__int_as_float(0x7f800000)", "double": "__longlong_as_double(0x7ff0000000000000LL)",
            "int": "2147483647", "long long": "9223372036854775807LL", "bool": "true"}[t]


def _combine(func: str, t: str, a: str, b: str) -> str:
    if func in ("sum", "mean"):
        return f"tilex_wadd<{t}>({a}, {b})" if t in ("int", "long long") else f"{a} + {b}"  # ints wrap
    if t in ("float", "double"):
        return f"f{func}{'f' if t == 'float' else ''}({a}, {b})"
    # a function call, not `a < b ? a : b`: each operand is evaluated exactly once, so a
    # shuffle operand is never issued by only the lanes of one branch (a divergent
    # shfl.sync with a full mask deadlocks the warp).
    return f"tilex_i{func}<{t}>({a}, {b})"  # tilex_math.cuh, which reduction() includes

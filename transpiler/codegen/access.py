"""Global-memory access of tiles: masked, vectorized loads and stores over a tensor's valid region."""
from __future__ import annotations

from .. import ast as A
from ..builtins import ATOMIC_OPS
from ..layout import Fragment, Layout
from ..replicas import replica_guard
from ..types import DType
from .c import reg, storage
from .context import KernelFacts
from .writer import Writer


class AccessEmitter:
    """Tensor subscripts: addresses of scalar elements, masked (vectorized) tile loads and stores.
    Reads the kernel's tensors (`facts`); index expressions come from `expr` (an ExprEmitter)."""

    def __init__(self, facts: KernelFacts, out: Writer, expr):
        self.facts, self.out, self.expr = facts, out, expr
        self.tensors, self.stride, self.dim = facts.tensors, facts.stride, facts.dim

    # ---- global memory: masked, vectorized tile loads and stores
    def index_axes(self, e: A.Index):
        """(tensor name, [(tensor axis, item)] in view order) of a tensor subscript."""
        base = e.base
        perm = None
        if isinstance(base, A.Attr):
            perm = base.ty.layout
            base = base.obj
        name = base.id
        axes = []
        for i, item in enumerate(e.items):
            axes.append((perm[i] if perm else i, item))
        return name, axes

    def scalar_address(self, e: A.Index) -> tuple[str, str]:
        name, axes = self.index_axes(e)
        terms, oks = [], []
        for ax, item in axes:
            i = f"(long long)({self.expr.scalar(item)})"
            st = self.stride(name, ax)
            terms.append(f"{i} * {st}" if st else i)
            oks.append(f"(unsigned long long){i} < (unsigned long long){self.dim(name, ax)}")
        mask = e.kwarg("mask")
        if mask is not None:  # a scalar subscript's mask is a scalar
            oks.append(f"({self.expr.scalar(mask)})")
        return " + ".join(terms), " && ".join(oks)

    def access(self, e: A.Index, layout: Layout, arr: str, store: bool, atomic: str | None = None,
               compare: str | None = None, result: str | None = None) -> None:
        """Emit a masked load of tensor subscript `e` into `arr` (or a store from it; with `atomic`, that
        atomic of each element, `compare` the array of cas's expected values, `result` the array that gets each
        element's old value: `other=` where the atomic did not run, and in the replicas that did not run it)."""
        name, axes = self.index_axes(e)
        dt = e.ty.dtype
        self.out.need("tilex_mem.cuh")
        mask = self.mask(e, layout)
        idx_lines, terms, oks = [], [], []
        # index tiles (a gather/scatter) give tile axis 0: each slot reads its row's index in registers
        gathered = any(not isinstance(item, A.Slice) and item.ty.shape for _, item in axes)
        rows = layout.axes(0) if gathered else None
        tile_axis = 1 if gathered else 0
        last_tensor_axis = len(self.tensors[name].type.dims) - 1
        vec_axis = None
        for ax, item in axes:
            if not isinstance(item, A.Slice) and item.ty.shape:
                iv = f"tx_i{ax}"
                idx_lines.append(f"const long long {iv} = (long long)({self.expr.tile(item, rows)});")
            elif isinstance(item, A.Slice):
                start = self.expr.scalar(item.start) if item.start is not None else "0"
                iv = f"tx_i{ax}"
                idx_lines.append(f"const long long {iv} = (long long)({start}) + ({layout.coord(tile_axis, 'tx_s')});")
                if ax == last_tensor_axis and tile_axis == len(layout.dims) - 1:
                    vec_axis = (iv, ax)
                tile_axis += 1
            else:
                iv = f"tx_i{ax}"
                idx_lines.append(f"const long long {iv} = (long long)({self.expr.scalar(item)});")
            st = self.stride(name, ax)
            terms.append(f"{iv} * {st}" if st else iv)
            if vec_axis is None or vec_axis[1] != ax:
                oks.append(f"(unsigned long long){iv} < (unsigned long long){self.dim(name, ax)}")
        tile_mask = mask is not None and bool(e.kwarg("mask").ty.shape)
        if mask is not None and not tile_mask:
            oks.append(mask)  # a scalar mask= : uniform, one more condition of every chunk
        elementwise = atomic is not None or tile_mask  # element by element: no vectors
        vec = self.vector_width(layout) if vec_axis is not None and not elementwise else 1
        ok = " && ".join(oks) or "true"
        off = " + ".join(terms)
        S, R = storage(dt), reg(dt)
        if store and vec_axis is not None and not gathered and not elementwise and \
                self.quad_store(layout, dt, name, vec_axis, idx_lines, off, ok, arr):
            return
        if atomic == "add" and S in ("tilex_bf16", "tilex_f16") and vec_axis is not None and not tile_mask \
                and self.vector_width(layout) > 1:
            # 2-byte adds of column-contiguous slot pairs: one packed f16x2 / bf16x2 instruction per aligned pair
            guard = replica_guard(layout)
            iv, ax = vec_axis
            if result is not None:
                call = (f"tilex_atomic_fetch_add_pair({name} + ({off}), {ok}{' && ' + guard if guard else ''}, -{iv}, "
                        f"(long long){self.dim(name, ax)} - {iv}, {arr}[tx_s], {arr}[tx_s + 1], ({R})({self.other(e)}), "
                        f"{result}[tx_s], {result}[tx_s + 1]);")
            else:
                call = (f"if ({ok}{' && ' + guard if guard else ''}) tilex_atomic_add_pair({name} + ({off}), -{iv}, "
                        f"(long long){self.dim(name, ax)} - {iv}, {arr}[tx_s], {arr}[tx_s + 1]);")
            self.out.need("tilex_atomic.cuh" if result is None else "tilex_atomic_fetch.cuh")
            self.out.unrolled(layout.slots, " ".join(idx_lines + [call]), step=2)
            return
        if vec > 1:
            iv, ax = vec_axis
            first = f"-{iv}"
            last = f"(long long){self.dim(name, ax)} - {iv}"
            if store:
                call = f"tilex_store_chunk<{vec}, {S}, {R}>({name}, {off}, {first}, {last}, {ok}, &{arr}[tx_s]);"
            else:
                other = self.other(e)
                nc = ", false" if self.tensors[name].is_out else ""  # a tensor the kernel writes: no __ldg
                call = f"tilex_load_chunk<{vec}, {S}, {R}{nc}>(&{arr}[tx_s], {name}, {off}, {first}, {last}, {ok}, ({R})({other}));"
            self.out.unrolled(layout.slots, " ".join(idx_lines + [call]), step=vec)
            return
        ok_all = " && ".join(oks + ([f"(unsigned long long){vec_axis[0]} < (unsigned long long){self.dim(name, vec_axis[1])}"] if vec_axis else [])) or "true"
        if tile_mask:
            ok_all = f"{ok_all} && {mask}[tx_s]"
        if atomic is not None:
            guard = replica_guard(layout)
            args = f"{compare}[tx_s], {arr}[tx_s]" if compare is not None else f"{arr}[tx_s]"
            run = f"{ok_all}{' && ' + guard if guard else ''}"
            if result is not None:
                self.out.need("tilex_atomic_fetch.cuh")
                body = f"{result}[tx_s] = ({run}) ? {ATOMIC_OPS[atomic].fetch}(&{name}[{off}], {args}) : ({R})({self.other(e)});"
            else:
                self.out.need("tilex_atomic.cuh")
                body = f"if ({run}) {ATOMIC_OPS[atomic].cuda}(&{name}[{off}], {args});"
        elif store:
            body = f"if ({ok_all}) {name}[{off}] = tilex_io<{S}>::put({arr}[tx_s]);"
        else:
            body = f"{arr}[tx_s] = ({ok_all}) ? ({R})tilex_io<{S}>::get({name}[{off}]) : ({R})({self.other(e)});"
        self.out.unrolled(layout.slots, " ".join(idx_lines + [body]))

    def mask(self, e: A.Index, layout: Layout) -> str | None:
        """The C condition of `e`'s scalar `mask=`, or the bool array holding its tile mask at `layout`'s slots."""
        m = e.kwarg("mask")
        if m is None:
            return None
        if not m.ty.shape:
            return f"({self.expr.scalar(m)})"
        mk = self.out.fresh("tx_mk")
        val = self.expr.tile(m, layout.view_for(m.ty.shape))
        self.out.emit(f"bool {mk}[{layout.slots}];")
        self.out.unrolled(layout.slots, f"{mk}[tx_s] = {val};")
        return mk

    @staticmethod
    def vector_width(layout: Layout) -> int:
        """Elements per thread that are contiguous along the tile's last axis in consecutive slots
        (one 16-byte access of a 2-byte dtype), or 1 when the layout's last axis is not vectorized."""
        root = layout.root
        if layout.dims[-1] == root.rank - 1 and root.vec_digit is not None \
                and layout.digits and layout.digits[-1] == root.vec_digit:
            return root.vec
        return 1

    def quad_store(self, layout: Layout, dt, name: str, vec_axis, idx_lines, off: str, ok: str, arr: str) -> bool:
        """Store a whole 2-byte MMA accumulator tile as 16-byte chunks (`tilex_store_quad`), if it is one.

        The fragment gives each lane two adjacent columns of every 8-column block; a quad of lanes
        together holds 8 columns, so four blocks at a time are exchanged within the quad and each lane
        stores one block whole: one 16-byte store instead of eight 2-byte ones.
        """
        root, S = layout.root, storage(dt)
        if not isinstance(root, Fragment) or layout != Layout.of(root) or dt not in (DType.BF16, DType.F16):
            return False
        if root.regs[-1] != (1, 2, 1) or (1, 4, 2, 1) not in root.thr:
            return False
        blocks = [g for g, (axis, radix, stride) in enumerate(root.regs) if axis == 1 and stride == 8]
        if len(blocks) != 1 or root.regs[blocks[0]][1] % 4:
            return False
        self.out.need("tilex_mma.cuh")
        g = blocks[0]
        ps, nb = layout.stride(g), root.regs[g][1]
        iv, ax = vec_axis
        # this lane stores block (j0 + t) of the four: its first column is 8 t past block j0's, not 2 t
        chunk = f"{iv} + 6 * (long long)(threadIdx.x & 3u)"
        block = f"(tx_s / {ps}) % {nb}" if nb > 4 else f"(tx_s / {ps})"
        call = (f"if ({block} % 4 == 0) {{ const long long tx_c = {chunk}; "
                f"tilex_store_quad<{ps}, {S}>({name}, {off} + 6 * (long long)(threadIdx.x & 3u), -tx_c, "
                f"(long long){self.dim(name, ax)} - tx_c, {ok}, &{arr}[tx_s]); }}")
        self.out.unrolled(layout.slots, " ".join(idx_lines + [call]), step=2)
        return True

    def other(self, e: A.Index) -> str:
        o = e.kwarg("other")
        if o is None:
            return "0"
        return self.expr.cast(self.expr.scalar(o), o.ty.dtype, e.ty.dtype)

"""Pass plan_matmul: find tensor-core main loops and choose how each one runs.

Needs: check_constraints. Guarantees: a `for` loop whose body only accumulates products of
tiles read from global tensors,

    for k in pipeline(0, K, BK, stages = S) {
        acc += a[m : m + BM, k : k + BK] @ w[n : n + BN, k : k + BK].T    # or b[k : k + BK, n : n + BN]
        acc2 += a[m : m + BM, k : k + BK] @ w2[n : n + BN, k : k + BK].T  # more products sharing `a`
    }

(or of batched tensors, `a[z, m : m + BM, k : k + BK] @ b[z, k : k + BK, n : n + BN]`: scalar
indices on the leading axes, fixed during the loop, then the two slices; a batch index outside
the tensor reads zeros, as any load does)

carries a `MatmulPlan` (`For.plan`): the operands (tensor, which axis is contiguous,
slice starts, batch indices), tile sizes, pipeline depth and the strategy the target affords:

* ``wgmma`` (sm_90a): a producer warpgroup streams both operands into a ring of `S`
  shared-memory stages with TMA (128-byte swizzle, completion on mbarriers) while one
  consumer warpgroup per 64 rows issues `wgmma` on them. Needs bf16/f16 operands, `a`
  K-contiguous, tile sizes wgmma can take, row pitches the `where` facts prove to be
  multiples of 16 bytes (TMA's rule), and nothing before the loop but scalars and the
  accumulators' initial values (the producer warps leave at the loop). A batched operand is
  read through an N-D tensor map of the whole tensor whose box is 1 on the batch axes.
* ``mma`` (sm_80 and later, and the fallback on sm_90a): every warp loads with
  `cp.async` into an `S`-stage ring (padded rows), reads fragments with `ldmatrix` and
  multiplies with `mma.sync.m16n8k16`.

Loops that match neither keep the generic `@` (operands staged in shared memory, f32
FMA). A `pipeline` loop that is not such a main loop (attention: `s = q @ k.T`, softmax, `acc = acc *
alpha + p @ v`) keeps the reason in `For.not_main`; how its register-tile products run (wgmma or
mma.sync) is choose_mma's choice, made after choose_threads. The accumulators of a planned loop live
in tensor-core fragment layouts (`layout.mma_fragment`) for their whole life, so epilogue code after
the loop (bias, activation, casts) runs on them in registers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import ast as A
from ..diagnostics import CompileError
from ..exprs import mentions, unparse, unparse_stmt
from ..launch_params import requested_launch
from ..targets import MATMUL_PAD, MMA_ARCHS, TENSOR_CORE_DTYPES, WGMMA_ARCHS, WGMMA_ONLY_DTYPES, smem_limit
from ..types import DType, MmaStrategy, TyWhat
from .base import Rewriter, Walker, names_in, stored_tensors

SWIZZLE_ELEMS = 64  # a 128-byte swizzled TMA box row of 2-byte elements


def swizzle_elems(dt: DType) -> int:
    """Elements in a 128-byte swizzled TMA box row: 64 of a 2-byte dtype, 128 of fp8."""
    return 128 // dt.itemsize
MAX_RANK = 5  # a batched operand's tensor map has one dim per tensor axis: TMA takes at most 5


@dataclass(frozen=True)
class Operand:
    """A global tile read by `@`: `tensor[*batch, rows : rows + R, k : k + BK]` in (row, k) order (the two
    slices on the tensor's last two axes, in either order; scalar indices on the axes before them)."""

    tensor: str
    kmajor: bool  # the K axis is the tensor's contiguous axis
    rows: A.Expr  # start of the M (for a) or N (for b) slice
    k: A.Expr  # start of the K slice
    text: str
    batch: tuple = ()  # the scalar indices of the leading axes (a rank-3/4 tensor), outermost first


@dataclass(frozen=True)
class Product:
    acc: str
    a: Operand
    b: Operand
    shape: tuple[int, int]  # the accumulator's [BM, BN]
    bk: int  # the K extent of one step


@dataclass(frozen=True)
class MatmulPlan:
    strategy: MmaStrategy
    bm: int
    bn: int
    bk: int
    stages: int
    dtype: DType
    products: tuple[Product, ...]
    warps_m: int
    warps_n: int
    consumers: int  # threads holding accumulators
    producers: int  # extra threads that only load (the TMA warpgroup)
    smem_bytes: int
    why: str = ""  # why the faster strategy was not taken (for `tilex explain`)
    persistent: bool = False  # wgmma loop inside a top-level tile loop: the producer runs that loop too
    # mma path: the operands whose row pitch is not known to be a multiple of 16 bytes. Where their rows turn out
    # unaligned at run time, the ring copies each row's 16-byte-aligned window by cp.async (async, zero-filled past
    # the row's end) and one extra stage-sized buffer receives the rows re-aligned for ldmatrix (`shifted` rings)
    shifted: tuple[str, ...] = ()

    @property
    def nb(self) -> int:
        return len(self.products)


def plan_matmul(program: A.Program, arch: str = "sm_90a") -> A.Program:
    return replace(program, kernels=tuple(_plan_kernel(k, arch) for k in program.kernels))


def _plan_kernel(k: A.Kernel, arch: str) -> A.Kernel:
    planner = _Planner(k, arch)
    return replace(k, body=planner.visit(k.body))


def _define(k: A.Kernel, name: str):
    return dict(k.defines).get(name)


class _Planner(Rewriter):
    def __init__(self, k: A.Kernel, arch: str):
        self.k = k
        self.arch = arch
        self.specialized = False  # at most one warp-specialized loop per kernel
        self.tensors = {p.name: p for p in k.params if p.type.dims is not None}

    def visit_For(self, s: A.For):
        body = self.visit(s.body)
        s = replace(s, body=body)
        found = self.products(s)
        if isinstance(found, tuple):
            plan = self.plan(s, found)
            if isinstance(plan, MatmulPlan):
                return replace(s, plan=plan)
            found = plan  # why not
        return replace(s, not_main=found) if s.pipelined else s  # for choose_mma's reasons

    # ---- recognizing the loop
    def products(self, s: A.For) -> tuple[Product, ...] | str:
        """The loop's products, or why it is not a main loop (a phrase for `tilex explain`)."""
        out = []
        for st in s.body.stmts:
            text = unparse_stmt(st).splitlines()[0]
            if not isinstance(st, A.Assign) or not isinstance(st.value, A.BinOp) or st.value.op is not A.BinOpKind.ADD:
                return f"the body does more than accumulate products ('{text}')"
            lhs, rhs = st.value.lhs, st.value.rhs
            mm = rhs if _is_acc(lhs, st.name) else lhs if _is_acc(rhs, st.name) else None
            if not isinstance(mm, A.BinOp) or mm.op is not A.BinOpKind.MATMUL:
                return f"the body does more than accumulate products ('{text}')"
            if st.value.ty.dtype is not DType.F32:
                return f"the accumulator '{st.name}' is {st.value.ty.dtype}, not f32"
            a, b = self.operand(mm.lhs, s.var, a_side=True), self.operand(mm.rhs, s.var, a_side=False)
            for op in (a, b):
                if isinstance(op, str):
                    return op
            out.append(Product(st.name, a, b, tuple(st.value.ty.shape), mm.lhs.ty.shape[1]))
        if not out:
            return "the body is empty"
        if len({p.acc for p in out}) != len(out):
            return "two products accumulate into one accumulator"
        if any(_key(p.a) != _key(out[0].a) for p in out):
            return "the products do not share their left operand (one ring holds one a tile per stage)"
        return tuple(out)

    def operand(self, e: A.Expr, var: str, a_side: bool) -> Operand | str:
        """Match `t[*batch, r0:r1, k0:k1]`, `t[*batch, k0:k1, r0:r1].T` or `t.T[...]` (rank 2) of a global
        tensor, `batch` scalar indices fixed during the loop; else say why not."""
        text = unparse(e)
        transposed = False
        if isinstance(e, A.Attr) and e.name == "T":
            transposed, e = True, e.obj
        if not isinstance(e, A.Index):
            return f"'{text}' is not a slice of a tensor parameter (a main loop loads both operands itself)"
        base = e.base
        if isinstance(base, A.Attr) and base.name == "T":
            base = base.obj  # `t.T[...]`: the items index the transposed view; only the tensor axes change (below)
        if not isinstance(base, A.Name) or base.id not in self.tensors:
            return f"'{text}' is not a slice of a tensor parameter (a main loop loads both operands itself)"
        rank = len(self.tensors[base.id].type.dims)
        if e.kwargs:
            return f"'{text}' has {e.kwargs[0][0]}= (a main loop fills the edges with zeros)"
        if rank > MAX_RANK:
            return f"'{text}' indexes a rank-{rank} tensor (main loops take ranks 2 to {MAX_RANK})"
        base_t = isinstance(e.base, A.Attr)
        if base_t and rank != 2:
            return f"'{text}' is a transposed view of a rank-{rank} tensor"
        *batch, first, second = e.items if len(e.items) == rank >= 2 else (None, None)
        if first is None or not all(isinstance(i, A.Slice) and i.start is not None for i in (first, second)):
            return (f"'{text}' does not slice the tensor's last two axes from given starts (a main loop reads "
                    "[rows, k] tiles of them)")
        for i in batch:
            if isinstance(i, A.Slice):
                return f"'{text}' slices more than the tensor's last two axes"
            if mentions(i, var):
                return f"the batch index '{unparse(i)}' of '{text}' moves with the loop variable '{var}'"
            if has_tile(i):
                return f"the batch index '{unparse(i)}' of '{text}' is not a scalar"
        if e.ty.dtype not in TENSOR_CORE_DTYPES + WGMMA_ONLY_DTYPES:
            return f"'{text}' is {e.ty.dtype} (tensor cores multiply bf16/f16, and f8e4m3 with wgmma)"
        # the (row, k) order of the tile as the product reads it
        if a_side:  # a tile is [rows, k]: k is the second item unless the tile is transposed
            rows, kk = (second, first) if transposed else (first, second)
        else:  # b tile is [k, cols]
            rows, kk = (first, second) if transposed else (second, first)
        # which tensor axis is K: items index the (possibly .T-viewed) tensor
        k_item = 1 if kk is second else 0
        k_tensor_axis = (1 - k_item) if base_t else k_item
        if mentions(rows.start, var):
            return f"the row slice of '{text}' moves with the loop variable '{var}'"
        if not mentions(kk.start, var):
            return f"the K slice of '{text}' does not move with the loop variable '{var}'"
        return Operand(base.id, k_tensor_axis == 1, rows.start, kk.start, unparse(e), tuple(batch))

    # ---- choosing the strategy
    def plan(self, s: A.For, products: tuple[Product, ...]) -> MatmulPlan | str:
        """The loop's plan, or why it cannot have one (a phrase for `tilex explain`)."""
        shapes = {p.shape for p in products}
        if len(shapes) != 1:  # one ring and one fragment layout per loop: every accumulator has the tile's shape
            return "the products' accumulators have different shapes (one fragment layout per loop)"
        bm, bn = shapes.pop()
        bk = products[0].bk
        dt = DType(self.tensors[products[0].a.tensor].type.dtype)
        if any(DType(self.tensors[p.b.tensor].type.dtype) is not dt for p in products):
            return "the operands have different dtypes"
        stages = max(2, s.stages)
        if self.arch not in MMA_ARCHS:
            return f"tensor-core main loops need sm_80 or later (target {self.arch})"
        if not products[0].a.kmajor:  # TODO(transposed a): ldmatrix.trans for a
            return f"'{products[0].a.text}' is read M-major (its tensor's contiguous axis is M, not K)"
        if bm % 16 or bn % 16 or bk % 16:
            return f"the {bm}x{bn}x{bk} tile is not a multiple of 16 on every side"
        limit = smem_limit(self.arch)
        warps = requested_launch(self.k).warps
        warps = warps if isinstance(warps, int) else None
        why = self.wgmma_obstacle(s, products, bm, bn, bk)
        if dt in WGMMA_ONLY_DTYPES and why is None and not all(p.b.kmajor for p in products):
            why = f"{dt} wgmma reads both operands K-major: the right operand must be an [N, K] tensor's tile, .T"
        if dt in WGMMA_ONLY_DTYPES and why is not None:
            return f"{dt} products run on tensor cores only as wgmma (sm_90a): {why}"
        if why is None:
            per_stage = (bm * bk + len(products) * bn * bk) * dt.itemsize

            def ring(n: int) -> int:  # n stages, the 1024-byte alignment slack and 2 mbarriers a stage
                return n * per_stage + 1024 + 16 * n

            fit = _deepest_ring(stages, ring, limit)
            self.specialized = True
            notes = [] if fit == stages else [f"{stages} stages do not fit in shared memory: using {fit}"]
            if warps is not None and warps != bm // 16:
                notes.append(f"WARPS={warps} ignored: wgmma takes one consumer warpgroup per 64 rows ({bm // 16} warps)")
            return MatmulPlan(MmaStrategy.WGMMA, bm, bn, bk, fit, dt, products, bm // 16, 1, bm // 64 * 128, 128,
                              ring(fit), "; ".join(notes), persistent=s not in self.k.body.stmts)
        wm, wn = _warp_grid(bm, bn, warps, len(products))
        if warps is not None and wm * wn != warps:
            raise CompileError(f"WARPS={warps} cannot split the {bm}x{bn} accumulator of this loop into warp tiles of "
                               f"at least 16x16 ({wm * wn} warps can)", s.span,
                               (f"use -D WARPS={wm * wn}, or larger tiles",))
        if (bm // wm) % 16 or (bn // wn) % 16:
            return f"the {bm}x{bn} tile does not split into warp tiles of multiples of 16 ({wm}x{wn} warps)"
        if not all(p.b.kmajor for p in products) and any(p.b.kmajor for p in products):
            return "the products' right operands mix [K, N] and [N, K] tensors (one ring layout per loop)"
        _, _, a_stage, b_stage = mma_stage(bm, bn, bk, products[0].b.kmajor)
        per_stage = (a_stage + len(products) * b_stage) * dt.itemsize
        shifted = tuple(t for t in dict.fromkeys([products[0].a.tensor] + [p.b.tensor for p in products])
                        if not self.pitch_known_aligned(t)) if dt.itemsize == 2 else ()
        extra = 1 if shifted else 0  # the re-aligned stage of a shifted ring
        fit = _deepest_ring(stages, lambda n: (n + extra) * per_stage, limit)
        if fit != stages:
            why = (why + "; " if why else "") + f"{stages} stages do not fit in shared memory on {self.arch}: using {fit}"
        return MatmulPlan(MmaStrategy.MMA, bm, bn, bk, fit, dt, products, wm, wn, 32 * wm * wn, 0, (fit + extra) * per_stage,
                          why or "", shifted=shifted)

    def wgmma_obstacle(self, s, products, bm, bn, bk) -> str | None:
        if self.arch not in WGMMA_ARCHS:
            return f"wgmma needs sm_90a (target {self.arch})"
        if self.specialized:
            return "only one warp-specialized loop per kernel"
        # every operand's pitch is asked (not only up to the first unproven one): launch-time specialization
        # learns all the facts this loop wants from one translation (Facts.wanted)
        whys = [self.tma_pitch(t) for t in sorted({p.a.tensor for p in products} | {p.b.tensor for p in products})]
        why = next((w for w in whys if w), None)
        if why:
            return why
        if bm % 64 or bm > 256:
            return "wgmma needs BM a multiple of 64, at most 256"
        swz = swizzle_elems(DType(self.tensors[products[0].a.tensor].type.dtype))
        if bk % swz:
            return f"TMA tiles need BK a multiple of {swz}"
        if len(products) * bn > 256 or bn % 16:
            return "wgmma takes at most 256 accumulator columns per warpgroup (BN x products), a multiple of 16"
        for p in products:
            if not p.b.kmajor and bn % SWIZZLE_ELEMS:
                return f"a [K, N] operand needs BN a multiple of {SWIZZLE_ELEMS}"
        top = self.k.body.stmts
        outer = next((o for o in top if isinstance(o, A.For) and not o.pipelined and o.plan is None
                      and s in o.body.stmts), None)
        if s not in top and outer is None:
            return "the loop is not at the top level of the kernel, nor directly in a top-level tile loop"
        accs = {p.acc for p in products}
        # the producer warps run this code too, outside the threads the tile layouts are made for:
        # scalars, and the accumulators' initial values (which they skip)
        before = top[: top.index(s)] if outer is None else top[: top.index(outer)] + outer.body.stmts[: outer.body.stmts.index(s)]
        for st in before:
            if not (isinstance(st, A.Assign) and (not has_tile(st.value) or st.name in accs
                                                  and isinstance(st.value, A.Call) and st.value.func in ("zeros", "full")
                                                  and not any(has_tile(a) for a in st.value.args[1:]))):
                return "statements before the loop do more than compute scalars and initialize the accumulators"
        if outer is not None:
            if has_tile(outer.start) or has_tile(outer.stop) or has_tile(outer.step):
                return "the tile loop's bounds are not scalars"
            why = self.producer_view(outer, s, products, before)
            if why:
                return why
        return None

    def producer_view(self, outer: A.For, s: A.For, products, before) -> str | None:
        """In a persistent kernel the producer warpgroup runs the tile loop with only the scalar
        statements before the main loop, one tile ahead of the consumers: every name it reads must
        get its value there (not from the epilogue), and no tensor it reads may be written."""
        reads: set = set()

        def add(e):
            if e is not None:
                reads.update(names_in(e))
        for e in (outer.start, outer.stop, outer.step, s.start, s.stop, s.step):
            add(e)
        for p in products:
            for op in (p.a, p.b):
                add(op.rows)
                add(op.k)
                for i in op.batch:
                    add(i)
        reads.discard(s.var)
        inner_before = outer.body.stmts[: outer.body.stmts.index(s)]
        for st in reversed(inner_before):
            if isinstance(st, A.Assign) and st.name in reads:
                add(st.value)
        assigned: dict = {}

        class _Assigned(Walker):
            def on_Assign(self, st):
                assigned.setdefault(st.name, []).append(st)

            def on_Store(self, st):  # `old = atomic_add(...)`
                if st.result is not None:
                    assigned.setdefault(st.result, []).append(st)

            def on_For(self, f):
                assigned.setdefault(f.var, []).append(f)
        _Assigned().walk(outer.body)
        for name in sorted(reads & set(assigned)):
            sts = assigned[name]
            if len(sts) != 1 or not any(sts[0] is st for st in inner_before):
                return (f"the loads read '{name}', which the tile loop assigns after the main loop or more than "
                        "once (the producer warps run only the statements before the main loop)")
        written = stored_tensors(self.k.body)
        for st in inner_before:
            if isinstance(st, A.Assign) and st.name in reads and names_in(st.value) & written & set(self.tensors):
                return (f"'{st.name}' reads a tensor the kernel writes (the producer warps run a tile ahead of "
                        "the stores)")
        return None

    def pitch_known_aligned(self, tensor: str) -> bool:
        """The row pitch of `tensor` is a known multiple of 16 bytes (a constant or a `where` fact; no wish recorded)."""
        p = self.tensors[tensor]
        last = p.type.dims[-1]
        per = 16 // DType(p.type.dtype).itemsize
        if isinstance(last, A.IntLit):
            return last.value % per == 0
        return self.k.facts is not None and self.k.facts.divisor(last.id) % per == 0

    def tma_pitch(self, tensor: str) -> str | None:
        """TMA reads rows whose pitch is a multiple of 16 bytes: prove it from the constant or a `where` fact."""
        p = self.tensors[tensor]
        last = p.type.dims[-1]
        item = DType(p.type.dtype).itemsize
        per = 16 // item
        if isinstance(last, A.IntLit):
            ok = last.value % per == 0
        else:
            ok = self.k.facts is not None and self.k.facts.proves(last.id, per)
        return None if ok else f"TMA needs the row pitch of '{tensor}' to be a multiple of 16 bytes: add `where {unparse(last)} % {per} == 0`"


def _warp_grid(bm: int, bn: int, warps: int | None, nb: int) -> tuple[int, int]:
    """Split a BM x BN tile over warps: warp tiles of at least 16 x 16, split the longer side first."""
    want = warps or max(4, min(8, bm * bn * nb // (32 * 64)))
    wm = wn = 1
    while wm * wn < want:
        if bm // wm >= bn // wn and bm // wm >= 32:
            wm *= 2
        elif bn // wn >= 32:
            wn *= 2
        elif bm // wm >= 32:
            wm *= 2
        else:
            break
    return wm, wn


def mma_stage(bm: int, bn: int, bk: int, kmajor_b: bool) -> tuple[int, int, int, int]:
    """(lda, ldb, a elements, elements of each b) of one stage of the mma path's ring: padded rows of a [BM, BK]
    and of b as [BN, BK] (K-contiguous) or [BK, BN]."""
    lda = bk + MATMUL_PAD
    ldb = (bk if kmajor_b else bn) + MATMUL_PAD
    return lda, ldb, bm * lda, (bn if kmajor_b else bk) * ldb


def _deepest_ring(stages: int, nbytes, limit: int) -> int:
    """The pipeline depth is a request: the deepest ring of at most `stages` (and at least 2) that fits.

    `nbytes` grows with the depth, so this bisects: a huge request (`-D STAGES=1e11`) costs ~40 probes."""
    if stages <= 2 or nbytes(stages) <= limit:
        return stages
    lo, hi = 2, stages  # nbytes(hi) > limit; the answer is lo if nothing deeper fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if nbytes(mid) <= limit:
            lo = mid
        else:
            hi = mid
    return lo


def has_tile(e) -> bool:
    """True if `e` or any expression below it is a tile (computed over the block's threads)."""
    if not isinstance(e, A.Expr):
        return False
    if e.ty is not None and e.ty.what == TyWhat.VALUE and e.ty.shape:
        return True
    return any(has_tile(c) for c in e.children())


def _is_acc(e: A.Expr, name: str) -> bool:
    return isinstance(e, A.Name) and e.id == name


def _key(op: Operand):
    return (op.tensor, op.kmajor, unparse(op.rows), unparse(op.k), tuple(unparse(i) for i in op.batch))


"""Pass choose_mma: how the tensor-core products of register tiles in each `pipeline` loop run, decided once.

Needs: plan_matmul (`For.plan` of the main loops, `For.not_main` of the other pipeline loops),
choose_threads (`kernel.info` a LaunchConfig). Guarantees: a `pipeline` loop that is not a main loop
and whose body has tensor-core products of register tiles (attention: `s = q @ k.T`, softmax,
`acc = acc * alpha + p @ v`) carries a `StreamedMma` (`For.mma`): ``wgmma`` (sm_90a) when every
product can take it, else ``mma`` (mma.sync m16n8k16 with ldmatrix) with the reason in `why`, for
`tilex explain`. No later pass revises the choice.

wgmma needs what the shapes and the target decide (`shape_obstacle`: 64-row warpgroup tiles, at most
256 result columns, B a tile of the loop with rows in whole 128-byte swizzle atoms, the accumulators'
registers) and what the memory passes will find (`memory_obstacle`: one warp per 16 rows for the
threads choose_threads chose, B a tile the loop streams into a 128-byte-swizzled ring, A kept in
shared memory swizzled or already in the product's row fragment in registers). For the latter this
pass asks the memory passes themselves: it runs place_resident, plan_streams and assign_layouts on the
kernel with its wgmma candidates (the budget's first attempt; later attempts never change these facts)
and gives each loop with an obstacle mma.sync, until no candidate has one (a loop moved to mma.sync can
change what another loop's products read: a resident tile is swizzled only when wgmma alone reads it).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import ast as A
from ..exprs import unparse, untransposed
from ..launch_params import requested_launch
from ..layout import Fragment, Layout
from ..targets import TENSOR_CORE_DTYPES, WGMMA_ARCHS, Target
from ..types import DType, MmaStrategy
from .assign_layouts import assign_layouts, mma_layout, register_a
from .base import Rewriter, Walker, for_loops
from .place_resident import place_resident
from .plan_matmul import SWIZZLE_ELEMS
from .plan_streams import plan_streams

# what choose_mma asks of the memory passes (their first attempt)
MEMORY_PREVIEW = (place_resident, plan_streams, assign_layouts)


@dataclass(frozen=True)
class StreamedMma:
    """How the tensor-core products of register tiles in a `pipeline` loop (not a main loop) run:
    ``wgmma`` (sm_90a, B from the loop's swizzled ring, A from shared memory or registers) or
    ``mma`` (mma.sync m16n8k16 with ldmatrix), and why not wgmma (for `tilex explain`)."""

    strategy: MmaStrategy
    why: str = ""


def choose_mma(program: A.Program, tgt: Target) -> A.Program:
    return replace(program, kernels=tuple(_kernel(program, k, tgt) for k in program.kernels))


def _kernel(program: A.Program, k: A.Kernel, tgt: Target) -> A.Kernel:
    chosen = {i: _by_shapes(f, k, tgt.arch) for i, f in enumerate(loops(k))}
    chosen = {i: m for i, m in chosen.items() if m is not None}
    k = with_mma(k, chosen)
    while any(m.strategy == MmaStrategy.WGMMA for m in chosen.values()):
        planned = replace(program, kernels=(k,))
        for run in MEMORY_PREVIEW:
            planned = run(planned, tgt)
        found = memory_obstacles(planned.kernels[0], tgt)
        if not found:
            break
        chosen.update({i: StreamedMma(MmaStrategy.MMA, why) for i, why in found.items()})
        k = with_mma(k, chosen)
    return k


def loops(k: A.Kernel) -> list:
    """Every `for` loop of `k`, in pre-order (the numbering `with_mma` and `memory_obstacles` use)."""
    return for_loops(k.body)


def with_mma(k: A.Kernel, chosen: dict) -> A.Kernel:
    """`k` with `For.mma` of its i-th loop (pre-order) set to `chosen[i]`."""
    count = [0]

    class _Set(Rewriter):
        def visit_For(self, f):
            i = count[0]
            count[0] += 1
            body = self.visit(f.body)
            return replace(f, body=body, mma=chosen.get(i, f.mma))
    return replace(k, body=_Set().visit(k.body))


# ---- what the shapes and the target decide
def _by_shapes(s: A.For, k: A.Kernel, arch: str) -> StreamedMma | None:
    """The StreamedMma of a pipeline loop (not a main loop) whose body multiplies tiles on tensor cores, as far as
    shapes and the target decide (``wgmma``: a candidate, memory_obstacle still to check); None for other loops.
    A loop that is not a main loop although its body accumulates products of global tiles (`For.not_main`) gets
    mma.sync: its products load their operands each iteration, not from a ring of the loop."""
    if not s.pipelined or s.plan is not None:
        return None
    found: list[A.BinOp] = []
    nested: list[A.BinOp] = []

    class _Products(Walker):
        def __init__(self, into):
            self.into = into

        def on_BinOp(self, e):
            if e.op is A.BinOpKind.MATMUL and tensor_core_product(e):
                self.into.append(e)

        def on_For(self, f):
            _Products(nested).walk(f.body)  # an inner loop has its own plan
            return False
    for st in s.body.stmts:
        _Products(found).walk(st)
    if not found:
        return None
    why = shape_obstacle(found, k, arch)
    if s.not_main and all(_global_operands(e) for e in found):
        why = (f"not a tensor-core main loop: {s.not_main}; the products load their operands each iteration "
               "and stage them in shared memory (no ring)")
    if why is None and nested:
        # an inner loop's products are planned with that loop, not checked against this loop's
        # swizzled ring, and mma.sync cannot read swizzled rows
        why = f"an inner loop multiplies tiles ('{unparse(nested[0])}'): wgmma only when the products are this loop's"
    return StreamedMma(MmaStrategy.MMA, why) if why else StreamedMma(MmaStrategy.WGMMA)


def shape_obstacle(products: list[A.BinOp], k: A.Kernel, arch: str) -> str | None:
    """Why the products of a pipeline loop cannot run as wgmma, as far as the shapes and the target decide, or None."""
    if arch not in WGMMA_ARCHS:
        return f"wgmma needs sm_90a (target {arch})"
    rows = {e.lhs.ty.shape[0] for e in products}
    if len(rows) != 1:
        return "the products have different row counts (one warp layout per loop)"
    m = rows.pop()
    warps = requested_launch(k).warps
    for e in products:
        text = unparse(e)
        (_, kk), (_, n) = e.lhs.ty.shape, e.rhs.ty.shape
        if m % 64 or m > 256:
            return f"wgmma needs a multiple of 64 rows (one warpgroup per 64): '{text}' has {m}"
        if n % 8 or n > 256:
            return f"wgmma takes 8 to 256 result columns, a multiple of 8: '{text}' has {n}"
        b = untransposed(e.rhs)
        if not isinstance(b, A.Name):
            return f"the right operand of '{text}' is not a tile the loop loads (wgmma reads it from the ring)"
        contiguous = b.ty.shape[1]  # `t.T` ([n, k]) and `t` ([k, n]) are both read as the rows of t
        if contiguous % SWIZZLE_ELEMS:
            return (f"wgmma reads '{b.id}' from 128-byte swizzled rows: its last dimension must be a "
                    f"multiple of {SWIZZLE_ELEMS} (it is {contiguous})")
        if isinstance(e.lhs, A.Name) and kk % SWIZZLE_ELEMS:
            return (f"wgmma reads '{e.lhs.id}' from 128-byte swizzled rows: its last dimension must be a "
                    f"multiple of {SWIZZLE_ELEMS} (it is {kk})")
    if isinstance(warps, int) and warps != m // 16:
        return f"wgmma runs one warp per 16 rows: the {m}-row products need WARPS={m // 16} (WARPS={warps})"
    # each product's f32 accumulator takes n / 2 registers per thread, live through the loop; ptxas
    # aborts (C7602) when they and ~32 more for addresses and the softmax exceed the per-thread budget
    accs = sum(e.rhs.ty.shape[1] // 2 for e in products)
    budget = min(255, 65536 // (32 * (warps if isinstance(warps, int) else m // 16)))
    if accs + 32 > budget:
        return (f"the products' accumulators take {accs} registers per thread: with ~32 more they exceed "
                f"the {budget} a thread of {m // 16} warps can have")
    return None


# ---- what the memory passes find
def memory_obstacles(k: A.Kernel, tgt: Target) -> dict[int, str]:
    """{loop number (pre-order): why not wgmma} for the wgmma loops of `k` (after assign_layouts) one of whose
    products cannot run as wgmma: the first such product in the order assign_layouts visits them."""
    number = {id(f): i for i, f in enumerate(loops(k))}
    threads = k.info.threads
    found: dict[int, str] = {}

    def expr(e, loop) -> None:
        if not isinstance(e, A.Expr):
            return
        for c in e.children():  # operands first, as assign_layouts annotates them
            expr(c, loop)
        if isinstance(e, A.BinOp) and e.op is A.BinOpKind.MATMUL and loop is not None \
                and loop.mma.strategy == MmaStrategy.WGMMA:
            frag = mma_layout(e, tgt, threads)
            why = frag is not None and memory_obstacle(e, untransposed(e.rhs), frag, loop, k.info)
            if why:
                found.setdefault(number[id(loop)], why)

    def block(b, loop) -> None:
        for s in (b.stmts if b is not None else ()):
            if isinstance(s, A.Assign):
                expr(s.value, loop)
            elif isinstance(s, A.Store):
                expr(s.value, loop)
                expr(s.target, loop)
            elif isinstance(s, A.If):
                expr(s.cond, loop)
                block(s.then, loop)
                block(s.orelse, loop)
            elif isinstance(s, A.For) and s.plan is None:  # a planned loop's products are its own
                for e in (s.start, s.stop, s.step):
                    expr(e, loop)
                block(s.body, s if s.mma is not None else loop)
    block(k.body, None)
    return found


def memory_obstacle(e: A.BinOp, b: A.Expr, frag: Layout, loop: A.For, plan) -> str | None:
    """Why the product `e` (annotated by assign_layouts; `b` its right operand's tile) of the wgmma loop `loop`
    cannot run as wgmma after all, or None. `plan`: the kernel's MemoryPlan."""
    m = e.lhs.ty.shape[0]
    threads = plan.threads
    if threads != 32 * (m // 16) or frag.root.warps != (m // 16, 1):
        return f"wgmma runs one warp per 16 rows: the {m}-row products need {m // 16} warps (the kernel has {threads // 32})"
    tiles = {t.name: t for t in loop.stream}
    what = b.id if isinstance(b, A.Name) else unparse(b)
    if isinstance(b, A.Name) and b.id in tiles and tiles[b.id].gather is not None:
        return f"'{what}' is gathered (its ring keeps padded rows: swizzled gathers are not implemented)"
    if isinstance(b, A.Name) and b.id in tiles and not tiles[b.id].swizzled:
        return f"'{what}' is also read into registers (its ring keeps padded rows for that)"
    if not (isinstance(b, A.Name) and b.id in tiles):
        return f"'{what}' is not streamed into shared memory by this loop (wgmma reads B from the ring)"
    if isinstance(e.lhs, A.Name) and e.lhs.id in plan.swizzled:
        return None
    if isinstance(e.lhs, A.Name) and e.lhs.id in tiles:  # A streamed by this loop: read from its swizzled ring
        return None if tiles[e.lhs.id].swizzled else f"'{e.lhs.id}' is also read into registers (its ring keeps padded rows for that)"
    if isinstance(e.lhs, A.Name) and e.lhs.id in plan.resident:
        return f"'{e.lhs.id}' is kept in shared memory for products that do not run as wgmma too (padded rows)"
    la = register_a(e.lhs).ty.layout
    if not (isinstance(la.root, Fragment) and la == Layout.of(la.root) and la.root.warps == (m // 16, 1)
            and la.root.shape[0] == m):
        return (f"the left operand of '{unparse(e)}' is neither kept in shared memory nor in the product's "
                "row fragment in registers")
    return None


def tensor_core_product(e: A.BinOp) -> bool:
    """`a @ b` of register tiles that tensor cores can multiply: 2-byte floats of one dtype, f32 result, M, N
    and K multiples of 16 (assign_layouts.mma_layout also needs a warp grid for the block's warps)."""
    dt = e.lhs.ty.dtype
    return (dt in TENSOR_CORE_DTYPES and e.rhs.ty.dtype is dt and e.ty.dtype is DType.F32
            and len(e.lhs.ty.shape) == 2 and len(e.rhs.ty.shape) == 2
            and e.lhs.ty.shape[0] % 16 == 0 and e.lhs.ty.shape[1] % 16 == 0 and e.rhs.ty.shape[1] % 16 == 0)


def _global_operands(e: A.BinOp) -> bool:
    """True if both operands of product `e` are loads (possibly transposed) of tensor parameters."""
    return all(isinstance(untransposed(x), A.Index) for x in (e.lhs, e.rhs))

"""Emission of planned tensor-core main loops (`passes/plan_matmul.py`) from Jinja templates.

`templates/matmul_mma.j2` (cp.async + ldmatrix + mma.sync) and `templates/matmul_wgmma.j2`
(TMA + mbarriers + wgmma, warp-specialized) hold the loop skeletons; this module fills in
the operand geometry (tensor names, slice starts, dims, shared-memory offsets) and the
per-shape `wgmma` instruction wrappers, and records the TMA descriptors the host must pass.
"""
from __future__ import annotations

from ..passes.plan_matmul import MMA_PAD, SWIZZLE_ELEMS, MatmulPlan
from ..spec import TmaMap
from ..types import DType

PTX_TYPE = {DType.BF16: "bf16", DType.F16: "f16"}
PRODUCER_REGS = 40
REGISTER_FILE = 65536


def kernel_tma_maps(k) -> tuple[TmaMap, ...]:
    """The TMA descriptors kernel `k`'s wgmma loops read, in parameter order (one per tensor and box)."""
    from ..passes.base import Walker

    found: list[tuple[str, int]] = []

    class _Find(Walker):
        def on_For(self, s):
            if s.plan is not None and s.plan.strategy == "wgmma":
                p = s.plan
                found.append((p.products[0].a.tensor, p.bm))
                for prod in p.products:
                    found.append((prod.b.tensor, p.bn if prod.b.kmajor else p.bk))

    _Find().walk(k.body)
    unique = list(dict.fromkeys(found))
    return tuple(TmaMap(f"tx_map{i}", t, rows, SWIZZLE_ELEMS) for i, (t, rows) in enumerate(unique))


def wgmma_wrapper(n: int, dt: DType, tnsp_b: bool) -> tuple[str, str]:
    """(name, C++ text) of a device function issuing one wgmma.m64n{n}k16 with both operands in shared memory."""
    name = f"wgmma_m64n{n}k16_{PTX_TYPE[dt]}_{'mn' if tnsp_b else 'k'}"
    regs = n // 2
    dl = ", ".join(f"%{i}" for i in range(regs))
    outs = []
    for i in range(0, regs, 8):
        outs.append(", ".join(f'"+f"(d[{j}])' for j in range(i, min(regs, i + 8))))
    out_text = ",\n                 ".join(outs)
    ptx = PTX_TYPE[dt]
    text = (f"__device__ __forceinline__ void tilex_{name}(float (&d)[{regs}], unsigned long long a, unsigned long long b) {{\n"
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
    lda = plan.bk + MMA_PAD
    ldb = plan.bk + MMA_PAD if kmajor_b else plan.bn + MMA_PAD
    products = []
    for p in plan.products:
        b = p.b
        if kmajor_b:
            brows, bcols, r0, c0 = plan.bn, plan.bk, em.scalar(b.rows), em.scalar(b.k)
        else:
            brows, bcols, r0, c0 = plan.bk, plan.bn, em.scalar(b.k), em.scalar(b.rows)
        products.append(dict(acc=p.acc, b=b.tensor, brows=brows, bcols=bcols, r0=r0, c0=c0,
                             nrows=em.dim(b.tensor, 0), ncols=em.dim(b.tensor, 1)))
    wm, wn = plan.bm // plan.warps_m, plan.bn // plan.warps_n
    b_stage = (plan.bn * ldb) if kmajor_b else (plan.bk * ldb)
    ctx = dict(text=_text(s), stages=plan.stages, bm=plan.bm, bn=plan.bn, bk=plan.bk, S=plan.dtype.ctype,
               warps_m=plan.warps_m, warps_n=plan.warps_n, wm=wm, wn=wn, rm=wm // 16, rn=wn // 8,
               lda=lda, ldb=ldb, a_stage=plan.bm * lda, b_stage=b_stage, kmajor_b=kmajor_b,
               threads=plan.consumers, products=products, var=s.var,
               start=em.scalar(s.start), stop=em.scalar(s.stop), step=em.scalar(s.step),
               a=dict(tensor=a.tensor, rows=em.scalar(a.rows), k=em.scalar(a.k),
                      nrows=em.dim(a.tensor, 0), ncols=em.dim(a.tensor, 1)))
    em.helpers.add("tilex_mma.cuh")
    return ctx


def render_wgmma(em, s, plan: MatmulPlan) -> dict:
    a = plan.products[0].a
    bm, bn, bk = plan.bm, plan.bn, plan.bk
    boxes, products = [], []
    amap = em.tma_map(a.tensor, bm)
    for c in range(bk // SWIZZLE_ELEMS):
        boxes.append(dict(offset=c * bm * 128, map=amap, c0=_plus(em.scalar(a.k), c * SWIZZLE_ELEMS), c1=em.scalar(a.rows)))
    offset = bm * bk * 2
    for p in plan.products:
        b = p.b
        if b.kmajor:
            bmap = em.tma_map(b.tensor, bn)
            for c in range(bk // SWIZZLE_ELEMS):
                boxes.append(dict(offset=offset + c * bn * 128, map=bmap, c0=_plus(em.scalar(b.k), c * SWIZZLE_ELEMS),
                                  c1=em.scalar(b.rows)))
        else:
            bmap = em.tma_map(b.tensor, bk)
            for q in range(bn // SWIZZLE_ELEMS):
                boxes.append(dict(offset=offset + q * bk * 128, map=bmap, c0=_plus(em.scalar(b.rows), q * SWIZZLE_ELEMS),
                                  c1=em.scalar(b.k)))
        name, text = wgmma_wrapper(bn, plan.dtype, not b.kmajor)
        em.functions[name] = text
        products.append(dict(acc=p.acc, kmajor=b.kmajor, offset=offset, fn=name))
        offset += bn * bk * 2
    em.helpers.add("tilex_sm90.cuh")
    return dict(text=_text(s), stages=plan.stages, bm=bm, bn=bn, bk=bk, consumers=plan.consumers,
                stage_bytes=offset, boxes=boxes, products=products, var=s.var,
                start=em.scalar(s.start), stop=em.scalar(s.stop), step=em.scalar(s.step),
                producer_regs=PRODUCER_REGS, consumer_regs=consumer_regs(plan.consumers))


def _plus(expr: str, c: int) -> str:
    return expr if c == 0 else f"({expr}) + {c}"


def _text(s) -> str:
    from ..exprs import unparse

    lines = [f"for {s.var} in pipeline({unparse(s.start)}, {unparse(s.stop)}, {unparse(s.step)}, stages = {s.stages}):"]
    for st in s.body.stmts:
        lines.append(f"    {st.name} += {unparse(st.value.rhs if isinstance(st.value.rhs, type(st.value)) else st.value.lhs)}")
    return " ".join(lines)

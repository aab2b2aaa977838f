"""plan_matmul: which loops become tensor-core main loops, with which strategy, and what they cost.

CPU only: compiles small kernels through the passes (and, for the shared-memory accounting, through the
template renderers of codegen/matmul.py) and checks the `MatmulPlan` each loop gets.
"""
from __future__ import annotations

import pytest

from tilex import ast as A
from tilex.codegen.emit import Emitter
from tilex.codegen.matmul import render_mma, render_wgmma
from tilex.diagnostics import CompileError
from tilex.exprs import unparse
from tilex.targets import SMEM_LIMIT
from tilex.pipeline import Options, compile_program
from tilex.translate import translate

PARAMS = ("x: bf16[M, K], w: bf16[N, K], w2: bf16[N, K], wt: bf16[K, N], xt: bf16[K, M], "
          "xf: f32[M, K], wf: f32[N, K], q: bf16[B, M, K], s: f32[R, 1024], y: out f32[M, N]")


def src(body: str, pre: str = "", post: str = "    y[m : m + BM, n : n + BN] = acc\n", where: str = "K % 8 == 0 and N % 8 == 0",
        cparams: str = "BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 3", loop: str | None = None) -> str:
    loop = loop or "for k in pipeline(0, K, BK, stages = STAGES)"
    return (f"kernel f<{cparams}>({PARAMS})\n"
            + (f"    where {where}\n" if where else "")
            + "    grid (cdiv(M, BM), cdiv(N, BN))\n{\n"
            "    m = program_id(0) * BM\n    n = program_id(1) * BN\n"
            + pre + "    acc = zeros(f32[BM, BN])\n"
            f"    {loop} {{\n" + "".join(f"        {line}\n" for line in body.strip().splitlines())
            + "    }\n" + post + "}\n")


PRODUCT = "acc += x[m : m + BM, k : k + BK] @ w[n : n + BN, k : k + BK].T"


def compiled(source: str, arch: str = "sm_90a", **defines) -> A.Kernel:
    return compile_program(source, "t.tile", Options(defines=defines, arch=arch), check=True).kernels[0]


def loops(k: A.Kernel) -> list[A.For]:
    out = []

    def go(b):
        for s in b.stmts:
            if isinstance(s, A.For):
                out.append(s)
                go(s.body)
            elif isinstance(s, A.If):
                go(s.then)
                if s.orelse is not None:
                    go(s.orelse)

    go(k.body)
    return out


def plan(source: str, arch: str = "sm_90a", **defines):
    """The plan of the kernel's first loop (None: not a tensor-core main loop)."""
    return loops(compiled(source, arch, **defines))[0].plan


# ---- the strategy per target and facts
@pytest.mark.parametrize("arch,strategy,why", [
    ("sm_90a", "wgmma", ""),
    ("sm_90", "mma", "wgmma needs sm_90a (target sm_90)"),
    ("sm_80", "mma", "wgmma needs sm_90a (target sm_80)"),
    ("sm_86", "mma", "wgmma needs sm_90a (target sm_86)"),
    ("sm_120", "mma", "wgmma needs sm_90a (target sm_120)"),
])
def test_strategy_per_arch(arch, strategy, why):
    p = plan(src(PRODUCT), arch)
    assert p.strategy == strategy and p.why.startswith(why) and (why or not p.why)
    assert (p.bm, p.bn, p.bk, p.nb) == (128, 128, 64, 1)
    if strategy == "wgmma":  # one consumer warpgroup per 64 rows, one producer warpgroup, warps_m = BM / 16
        assert (p.consumers, p.producers, p.warps_m, p.warps_n) == (256, 128, 8, 1)
    else:
        assert p.producers == 0 and p.consumers == 32 * p.warps_m * p.warps_n
        assert (p.bm // p.warps_m) % 16 == 0 and (p.bn // p.warps_n) % 16 == 0


def test_no_plan_before_sm80():
    assert plan(src(PRODUCT), "sm_75") is None


@pytest.mark.parametrize("where,why", [
    ("", "TMA needs the row pitch of 'w' to be a multiple of 16 bytes: add `where K % 8 == 0`"),
    ("K % 4 == 0", "TMA needs the row pitch of 'w' to be a multiple of 16 bytes: add `where K % 8 == 0`"),
    ("K % 16 == 0", ""),
])
def test_tma_needs_the_pitch_proven(where, why):
    p = plan(src(PRODUCT, where=where))
    assert p.why == why and p.strategy == ("wgmma" if not why else "mma")


def test_tma_pitch_of_every_operand_tensor():
    # [K, N] b: the pitch is N, so K % 8 alone does not prove it
    p = plan(src("acc += x[m : m + BM, k : k + BK] @ wt[k : k + BK, n : n + BN]", where="K % 8 == 0"))
    assert p.strategy == "mma" and "'wt'" in p.why and "N % 8 == 0" in p.why


@pytest.mark.parametrize("defines,why", [
    (dict(BM=32), "wgmma needs BM a multiple of 64, at most 256"),
    (dict(BK=32), "TMA tiles need BK a multiple of 64"),
    (dict(BN=512, BM=64), "wgmma takes at most 256 accumulator columns per warpgroup"),
])
def test_wgmma_obstacles_from_tile_sizes(defines, why):
    p = plan(src(PRODUCT), **defines)
    assert p.strategy == "mma" and p.why.startswith(why)


def test_wgmma_obstacle_products_times_bn():
    body = PRODUCT + "\nacc2 += x[m : m + BM, k : k + BK] @ w2[n : n + BN, k : k + BK].T"
    s = src(body, post="    y[m : m + BM, n : n + BN] = acc + acc2\n").replace(
        "    acc = zeros(f32[BM, BN])\n", "    acc = zeros(f32[BM, BN])\n    acc2 = zeros(f32[BM, BN])\n")
    assert plan(s, BN=128).strategy == "wgmma"
    p = plan(s, BN=256)
    assert p.strategy == "mma" and "at most 256 accumulator columns" in p.why


def test_wgmma_obstacle_kn_operand_needs_bn_multiple_of_64():
    p = plan(src("acc += x[m : m + BM, k : k + BK] @ wt[k : k + BK, n : n + BN]"), BN=32)
    assert p.strategy == "mma" and p.why == "a [K, N] operand needs BN a multiple of 64"


def test_wgmma_obstacle_loop_not_at_top_level():
    s = src(PRODUCT).replace("    for k in", "    if M > 0 {\n    for k in").replace(
        "    }\n    y[", "    }\n    }\n    y[")
    p = plan(s)
    assert p.strategy == "mma" and p.why == "the loop is not at the top level of the kernel, nor directly in a top-level tile loop"


@pytest.mark.parametrize("pre", [
    "    t = x[m : m + BM, 0 : BK]\n",                 # a tile before the loop
    "    r = sum(s[0 : 2, 0 : 1024])\n",               # a scalar, but computed as a tile over the threads
    "    r = max(s[0, 0 : 1024])\n",
])
def test_wgmma_obstacle_tile_work_before_the_loop(pre):
    """The producer warpgroup (threads >= consumers) runs the code before the loop too, in layouts made for the
    consumer threads: a reduction there would let producer warps write other warps' shared-memory partials."""
    p = plan(src(PRODUCT, pre=pre))
    assert p.strategy == "mma"
    assert p.why == "statements before the loop do more than compute scalars and initialize the accumulators"


def test_scalars_before_the_loop_keep_wgmma():
    p = plan(src(PRODUCT, pre="    r = s[0, 0] * 2.0\n    t = cdiv(K, BK)\n"))
    assert p.strategy == "wgmma"


def test_one_warp_specialized_loop_per_kernel():
    post = ("    acc2 = zeros(f32[BM, BN])\n    for k in pipeline(0, K, BK, stages = STAGES) {\n"
            "        acc2 += x[m : m + BM, k : k + BK] @ w2[n : n + BN, k : k + BK].T\n    }\n"
            "    y[m : m + BM, n : n + BN] = acc + acc2\n")
    k = compiled(src(PRODUCT, post=post))
    first, second = (s.plan for s in loops(k))
    assert first.strategy == "wgmma"
    assert second.strategy == "mma" and second.why == "only one warp-specialized loop per kernel"


# ---- pipeline depth: fewer stages when the ring does not fit
def test_wgmma_stages_reduced_to_fit():
    p = plan(src(PRODUCT), BM=128, BN=256, BK=64, STAGES=8)
    per_stage = (128 * 64 + 256 * 64) * 2
    assert p.stages == 4 and p.smem_bytes == 4 * per_stage + 1024 + 16 * 4
    assert 5 * per_stage + 1024 + 16 * 5 > SMEM_LIMIT["sm_90a"] >= p.smem_bytes
    assert p.why == "8 stages do not fit in shared memory: using 4"


def test_mma_stages_reduced_to_fit_on_sm86():
    p = plan(src(PRODUCT), "sm_86", BM=128, BN=128, BK=32, STAGES=8)
    per_stage = (128 + 128) * (32 + 8) * 2
    assert p.stages == 4 and p.smem_bytes == 4 * per_stage
    assert 5 * per_stage > SMEM_LIMIT["sm_86"] >= p.smem_bytes
    assert p.why.endswith("8 stages do not fit in shared memory on sm_86: using 4")


def test_stages_that_fit_are_kept():
    p = plan(src(PRODUCT), STAGES=3)
    assert p.stages == 3 and p.why == ""


def test_two_stages_that_do_not_fit_are_an_error():
    with pytest.raises(CompileError, match="needs .* bytes of shared memory"):
        compiled(src(PRODUCT), "sm_86", BM=256, BN=256, BK=128, STAGES=2)


def _emitter(k: A.Kernel):
    return Emitter(k, "t.tile").loops  # the main-loop part, which render_mma/render_wgmma take


@pytest.mark.parametrize("arch,body,defines", [
    ("sm_90a", PRODUCT, {}),
    ("sm_90a", "acc += x[m : m + BM, k : k + BK] @ wt[k : k + BK, n : n + BN]", {}),
    ("sm_80", PRODUCT, dict(BK=32, STAGES=4)),
    ("sm_80", "acc += x[m : m + BM, k : k + BK] @ wt[k : k + BK, n : n + BN]", dict(BN=64)),
    ("sm_86", PRODUCT + "\nacc2 += x[m : m + BM, k : k + BK] @ w2[n : n + BN, k : k + BK].T", dict(BN=64, STAGES=6)),
])
def test_smem_accounting_matches_what_the_templates_address(arch, body, defines):
    """The plan's byte count (checked against the target's limit) is what the rendered ring addresses."""
    s = src(body, post="    y[m : m + BM, n : n + BN] = acc\n")
    if "acc2" in body:
        s = s.replace("    acc = zeros(f32[BM, BN])\n", "    acc = zeros(f32[BM, BN])\n    acc2 = zeros(f32[BM, BN])\n")
    k = compiled(s, arch, **defines)
    loop = loops(k)[0]
    p = loop.plan
    assert k.info.smem_bytes >= p.smem_bytes and k.info.smem_bytes <= k.info.smem_limit
    if p.strategy == "wgmma":
        ctx = render_wgmma(_emitter(k), loop, p)
        assert ctx["stage_bytes"] % 1024 == 0  # every stage starts on a 128-byte-swizzle atom
        assert all(b["offset"] % 1024 == 0 for b in ctx["boxes"])
        assert p.smem_bytes == p.stages * ctx["stage_bytes"] + 1023 + 1 + 2 * 8 * p.stages
        assert ctx["stage_bytes"] == (p.bm * p.bk + p.nb * p.bn * p.bk) * 2
    else:
        ctx = render_mma(_emitter(k), loop, p)
        used = p.stages * (ctx["a_stage"] + p.nb * ctx["b_stage"]) * p.dtype.itemsize
        assert used == p.smem_bytes
        assert (ctx["lda"] * 2) % 16 == 0 and (ctx["ldb"] * 2) % 16 == 0  # ldmatrix rows and cp.async 16-byte chunks
        assert ctx["rn"] % 2 == 0  # ldmatrix.x4 loads two 8-column B blocks at a time
        assert ctx["a_stage"] * 2 % 16 == 0 and ctx["b_stage"] * 2 % 16 == 0


# ---- operands: which tensor axis is K, .T on either side
@pytest.mark.parametrize("b,tensor,kmajor", [
    ("w[n : n + BN, k : k + BK].T", "w", True),      # w stored [N, K]
    ("w.T[k : k + BK, n : n + BN]", "w", True),      # the same tile through a transposed tensor view
    ("wt[k : k + BK, n : n + BN]", "wt", False),     # wt stored [K, N]
    ("wt.T[n : n + BN, k : k + BK].T", "wt", False),
])
def test_b_operand_orientation(b, tensor, kmajor):
    p = plan(src(f"acc += x[m : m + BM, k : k + BK] @ {b}", where="K % 8 == 0 and N % 8 == 0"))
    assert p is not None and p.strategy == "wgmma"
    op = p.products[0].b
    assert (op.tensor, op.kmajor, unparse(op.rows), unparse(op.k)) == (tensor, kmajor, "n", "k")
    a = p.products[0].a
    assert (a.tensor, a.kmajor, unparse(a.rows), unparse(a.k)) == ("x", True, "m", "k")


def test_a_operand_through_two_transposes():
    p = plan(src("acc += x.T[k : k + BK, m : m + BM].T @ w[n : n + BN, k : k + BK].T"))
    a = p.products[0].a
    assert (a.tensor, a.kmajor, unparse(a.rows), unparse(a.k)) == ("x", True, "m", "k")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_m_major_a_is_not_planned(arch):
    # xt stored [K, M]: a would need ldmatrix.trans (not implemented): the generic '@' keeps it correct
    assert plan(src("acc += xt[k : k + BK, m : m + BM].T @ w[n : n + BN, k : k + BK].T", where="M % 8 == 0"), arch) is None


def test_slice_starts_are_kept_verbatim():
    p = plan(src("acc += x[m + 16 : m + 16 + BM, 2 * k : 2 * k + BK] @ w[n - 8 : n - 8 + BN, 2 * k : 2 * k + BK].T"))
    a, b = p.products[0].a, p.products[0].b
    assert (unparse(a.rows), unparse(a.k), unparse(b.rows), unparse(b.k)) == ("m + 16", "2 * k", "n - 8", "2 * k")


# ---- several products in one loop
def _two(body2: str, acc2: str = "zeros(f32[BM, BN])", post: str = "    y[m : m + BM, n : n + BN] = acc + acc2\n") -> str:
    s = src(PRODUCT + "\n" + body2, post=post)
    return s.replace("    acc = zeros(f32[BM, BN])\n", f"    acc = zeros(f32[BM, BN])\n    acc2 = {acc2}\n")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_products_sharing_a(arch):
    p = plan(_two("acc2 += x[m : m + BM, k : k + BK] @ w2[n : n + BN, k : k + BK].T"), arch, BN=64)
    assert p.nb == 2 and [pr.acc for pr in p.products] == ["acc", "acc2"]
    assert {pr.b.tensor for pr in p.products} == {"w", "w2"}


def test_products_with_different_a_are_not_planned():
    assert plan(_two("acc2 += x[m + BM : m + 2 * BM, k : k + BK] @ w2[n : n + BN, k : k + BK].T")) is None


def test_products_with_different_accumulator_shapes_are_not_planned():
    """One ring holds BN rows of every b and one fragment layout serves every accumulator: a second accumulator
    of another width would get the first one's layout (half of it never computed, never stored)."""
    body2 = "acc2 += x[m : m + BM, k : k + BK] @ w2[n : n + 2 * BN, k : k + BK].T"
    s = _two(body2, acc2="zeros(f32[BM, 2 * BN])", post="    y[m : m + BM, n : n + BN] = acc\n")
    for arch in ("sm_90a", "sm_80"):
        k = compiled(s, arch, BN=64)
        assert loops(k)[0].plan is None
        layouts = k.info.var_layouts
        assert layouts["acc2"].shape == (128, 128) and layouts["acc"].shape == (128, 64)


def test_same_accumulator_twice_is_not_planned():
    assert plan(_two("acc += x[m : m + BM, k : k + BK] @ w2[n : n + BN, k : k + BK].T")) is None


@pytest.mark.parametrize("arch,planned", [("sm_90a", True), ("sm_80", False)])
def test_mixed_b_orientations(arch, planned):
    """wgmma takes each product's orientation separately; the mma ring shares one b row pitch."""
    p = plan(_two("acc2 += x[m : m + BM, k : k + BK] @ wt[k : k + BK, n : n + BN]"), arch, BN=64)
    assert (p is not None) == planned
    if planned:
        assert [pr.b.kmajor for pr in p.products] == [True, False]


# ---- loops that must stay generic
@pytest.mark.parametrize("body", [
    PRODUCT + "\nt = x[m : m + BM, k : k + BK]",                                          # other work in the loop
    "acc = acc - x[m : m + BM, k : k + BK] @ w[n : n + BN, k : k + BK].T",                # not an accumulation
    "acc = x[m : m + BM, k : k + BK] @ w[n : n + BN, k : k + BK].T",
    "acc += x[m : m + BM, k : k + BK] @ w[k : k + BN, k : k + BK].T",                     # rows move with k
    "acc += x[m : m + BM, 0 : BK] @ w[n : n + BN, 0 : BK].T",                              # k does not move
    "acc += x[m : m + BM, k : k + BK, other = 1.0] @ w[n : n + BN, k : k + BK].T",        # other=: not zero fill
    "acc += xf[m : m + BM, k : k + BK] @ wf[n : n + BN, k : k + BK].T",                   # f32 operands
    "acc += q[k // BK, m : m + BM, k : k + BK] @ w[n : n + BN, k : k + BK].T",            # batch moves with k
    "acc += q[0, m : m + BM, k : k + BK, other = 1.0] @ w[n : n + BN, k : k + BK].T",     # batched, other=
    "acc += (x[m : m + BM, k : k + BK] * x[m : m + BM, k : k + BK]) @ w[n : n + BN, k : k + BK].T",
])
def test_loops_that_are_not_planned(body):
    assert plan(src(body)) is None


def test_tiles_not_multiple_of_16_are_not_planned():
    assert plan(src(PRODUCT), BM=8) is None
    assert plan(src(PRODUCT), "sm_80", BN=8) is None


def test_warps_define_sets_the_mma_warp_grid():
    s = src(PRODUCT, cparams="BM: int = 64, BN: int = 64, BK: int = 32, STAGES: int = 2, WARPS: int = 8")
    p = plan(s, "sm_80")
    assert p.warps_m * p.warps_n == 8 and p.consumers == 256
    k = compiled(s, "sm_80")
    assert k.info.threads == 256


# ---- codegen of the planned mma loop
def test_mma_ring_waits_for_readers_of_scratch_shared_memory():
    """A cross-warp reduction before the loop reads its partials from the start of shared memory after its last
    barrier; the ring's first cp.async fill writes there, so a barrier must separate them."""
    pre = "    r = sum(s[0 : 64, 0 : 1024])\n"
    text = translate(src(PRODUCT, pre=pre, post="    y[m : m + BM, n : n + BN] = acc * r\n"), "t.tile",
                     Options(arch="sm_80", defines=dict(BM=64, BN=64, BK=32))).cuda
    body = text[text.index("r = sum("):]
    last_read = body.rindex("tx_sc[", 0, body.index("tx_fill"))
    first_fill = body.index("tx_fill(tx_q, tx_q)")
    assert "__syncthreads();" in body[last_read:first_fill]


def test_wgmma_says_when_warps_is_ignored():
    """wgmma fixes its warps (one consumer warpgroup per 64 rows): a different WARPS is reported, not obeyed silently."""
    from pathlib import Path

    from tilex.explain import explain
    from tilex.pipeline import Options, compile_program

    text = (Path(__file__).resolve().parents[1] / "stdlib_kernels" / "linear.tile").read_text()
    text = text.replace("STAGES: int = 4, GROUP: int = 8>(\n    x: T[M, K], w: T[N, K], y: out T[M, N])\n    where",
                        "STAGES: int = 4, GROUP: int = 8, WARPS: int = 4>(\n    x: T[M, K], w: T[N, K], y: out T[M, N])\n    where", 1)
    prog = compile_program(text, "linear.tile", Options(arch="sm_90a", kernel="linear"))
    loop = explain(prog)[0]["matmul_loops"][0]
    assert loop["strategy"] == "wgmma" and "WARPS=4 ignored" in loop["note"]


# ---- persistent kernels: the wgmma loop directly in a top-level tile loop
def persistent_src(pre_inner: str = "", epilogue: str = "        y[m : m + BM, n : n + BN] = acc * 2.0\n") -> str:
    return ("kernel f<BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int = 3, P: int = 4>(" + PARAMS + ")\n"
            "    where K % 8 == 0 and N % 8 == 0\n"
            "    grid (P,)\n{\n"
            "    tn = cdiv(N, BN)\n"
            "    for t in range(program_id(0), cdiv(M, BM) * tn, num_programs(0)) {\n"
            "        m = t // tn * BM\n        n = t % tn * BN\n" + pre_inner
            + "        acc = zeros(f32[BM, BN])\n"
            "        for k in pipeline(0, K, BK, stages = STAGES) {\n"
            f"            {PRODUCT}\n"
            "        }\n" + epilogue + "    }\n}\n")


def test_persistent_loop_plan_and_ring_region():
    k = compiled(persistent_src())
    outer, inner = loops(k)
    assert outer.plan is None and inner.plan.strategy == "wgmma" and inner.plan.persistent
    # the ring has a region of its own at the start of shared memory: epilogue scratch cannot overlap it
    assert k.info.resident_bytes >= inner.plan.smem_bytes
    assert k.info.smem_bytes >= k.info.resident_bytes
    top = compiled(src(PRODUCT))
    assert not loops(top)[0].plan.persistent and top.info.resident_bytes == 0


def test_persistent_loop_code():
    cuda = translate(persistent_src(), "t.tile", Options(arch="sm_90a")).cuda
    # the producer walks the tile loop with the scalars only; the ring position carries across tiles
    producer = cuda[cuda.index("// the producer warpgroup"): cuda.index("return;")]
    assert "for (int t = " in producer and "int m = " in producer and "acc" not in producer
    assert "tx_it += tx_trips;" in producer and "tilex_tma_load_2d" in producer
    consumer = cuda[cuda.index("return;"):]
    assert consumer.count("for (int t = ") == 1 and "float acc[" in consumer
    # the last stage of each tile is handed back after wait_group 0
    assert "tilex_mbar_arrive(&tx_empty[(tx_it + tx_trips - 1) % 3])" in consumer
    assert "__launch_bounds__(384, 1)" in cuda


@pytest.mark.parametrize("pre_inner,why", [
    ("        t0 = x[m : m + BM, 0 : BK]\n",
     "statements before the loop do more than compute scalars and initialize the accumulators"),
])
def test_persistent_loop_obstacles(pre_inner, why):
    p = loops(compiled(persistent_src(pre_inner)))[1].plan
    assert p.strategy == "mma" and p.why == why


def test_loop_two_levels_down_is_not_persistent():
    s = persistent_src().replace("        for k in", "        if M > 0 {\n        for k in").replace(
        "        }\n        y[", "        }\n        }\n        y[")
    p = [lp for lp in loops(compiled(s)) if lp.plan is not None][0].plan
    assert p.strategy == "mma" and p.why == "the loop is not at the top level of the kernel, nor directly in a top-level tile loop"



def test_persistent_needs_the_producers_names_before_the_main_loop():
    """A name the loads read that the epilogue updates: the producer would never see the update."""
    src = persistent_src(epilogue="        y[m : m + BM, n : n + BN] = acc\n        if n + BN >= N {\n            m = m + BM\n        }\n")
    src = src.replace("        m = t // tn * BM\n", "").replace("    tn = cdiv(N, BN)\n", "    tn = cdiv(N, BN)\n    m = 0\n")
    p = loops(compiled(src))[1].plan
    assert p.strategy == "mma" and "the loads read 'm'" in p.why


def test_persistent_producer_reads_no_tensor_the_kernel_writes():
    src = persistent_src(pre_inner="        r = s[0, 0].to(i32)\n",
                         epilogue="        y[m : m + BM, n : n + BN] = acc\n").replace(
        "        m = t // tn * BM\n", "        m = t // tn * BM + r * 0\n", 1)
    # reorder: r must come before m reads it
    src = src.replace("        m = t // tn * BM + r * 0\n        n = t % tn * BN\n        r = s[0, 0].to(i32)\n",
                      "        r = s[0, 0].to(i32)\n        m = t // tn * BM + r * 0\n        n = t % tn * BN\n")
    assert loops(compiled(src))[1].plan.strategy == "wgmma"  # s is only read
    written = src.replace("y: out f32[M, N]", "y: out f32[M, N]").replace(
        "        y[m : m + BM, n : n + BN] = acc\n", "        y[m : m + BM, n : n + BN] = acc\n        s[0, 0] = 1.0\n")
    written = written.replace("s: f32[R, 1024]", "s: out f32[R, 1024]")
    p = loops(compiled(written))[1].plan
    assert p.strategy == "mma" and "reads a tensor the kernel writes" in p.why


def test_persistent_second_matmul_loop_is_placed_after_the_ring():
    body2 = ("        acc2 = zeros(f32[BM, BN])\n        for k in pipeline(0, K, BK, stages = STAGES) {\n"
             "            acc2 += x[m : m + BM, k : k + BK] @ w2[n : n + BN, k : k + BK].T\n        }\n"
             "        y[m : m + BM, n : n + BN] = acc * acc2\n")
    k = compiled(persistent_src(epilogue=body2))
    ring = k.info.resident_bytes
    assert ring > 0 and [lp.plan.strategy for lp in loops(k) if lp.plan] == ["wgmma", "mma"]
    cuda = translate(persistent_src(epilogue=body2), "t.tile", Options(arch="sm_90a")).cuda
    assert f"tx_ra = reinterpret_cast<tilex_bf16*>((tilex_smem + {ring}))" in cuda


def test_persistent_ring_gets_shallower_for_the_epilogues_scratch():
    """A transposed store needs a [BN, BM] conversion through shared memory on top of the ring's region."""
    src = persistent_src(epilogue="        yt[n : n + BN, m : m + BM] = acc.T.to(bf16)\n").replace(
        "y: out f32[M, N]", "y: out f32[M, N], yt: out bf16[N, M]")
    k = compiled(src, BN=256, STAGES=4)
    p = loops(k)[1].plan
    assert p.strategy == "wgmma" and p.stages < 4 and "do not fit with the epilogue's shared memory" in p.why
    assert k.info.smem_bytes <= k.info.smem_limit

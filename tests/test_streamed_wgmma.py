"""Products in a streamed `pipeline` loop on wgmma (sm_90a): choose_mma's StreamedMma, the memory passes'
128-byte swizzled tiles and its demotions, the generated forms, explain's lines, the mma.sync fallback
elsewhere, and (marker nvcc) ptxas on attention_prefill: no spills, wgmma not serialized. The numbers
are checked on the GPU by tests/test_stdlib_attention_gpu.py (interpreter semantics do not change)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from test_plan_matmul import loops
from tilex.pipeline import Options
from tilex.stdlib import _launch as L
from tilex.translate import translate

PREFILL = L.source("attention_prefill")

# q resident, k read both as `k.T` (K-major B) and `k` (N-major B) from one swizzled ring
TOY = """
kernel f<BM: int = 128, BN: int = 64, D: int = 64, WARPS: int = 8>(q: bf16[S, D], k: bf16[S, D], o: out f32[S, D])
    grid (cdiv(S, BM),)
{
    m0 = program_id(0) * BM
    qt = q[m0 : m0 + BM, 0 : D]
    acc = zeros(f32[BM, D])
    for n0 in pipeline(0, S, BN, stages = 2) {
        kt = k[n0 : n0 + BN, 0 : D]
        s = qt @ kt.T
        acc = acc + s.to(bf16) @ kt
    }
    o[m0 : m0 + BM, 0 : D] = acc
}
"""


def _compile(src, arch="sm_90a", **defines):
    t = translate(src, "f.tile", Options(arch=arch, defines=defines))
    k = t.program.kernels[0]
    return [f for f in loops(k) if f.pipelined], k, t.cuda


def _body(cuda: str) -> str:
    """The kernel function's text (the helpers before it define every form)."""
    return cuda[cuda.index('extern "C" __global__'):]


@pytest.mark.parametrize("defines", [dict(D=128), dict(D=128, BN=128), dict(D=64), dict(D=64, BN=128),
                                     dict(D=128, BM=64, WARPS=4), dict(D=128, CAUSAL=False)])
def test_attention_prefill_runs_wgmma_on_sm90a(defines):
    fs, k, cuda = _compile(PREFILL, **defines)
    assert [f.mma.strategy for f in fs] == ["wgmma", "wgmma"], [f.mma for f in fs]
    assert all([t.name for t in f.stream if t.swizzled] == ["kt", "vt"] for f in fs)
    assert k.info.swizzled == frozenset({"qt"}) and k.info.align == 1024
    body = _body(cuda)
    bn, d = defines.get("BN", 64), defines["D"]
    # S = Q K^T: A (q) and B (k, K-major) by descriptors; O += P V: A (p) from registers, B (v) N-major
    assert f"tilex_wgmma_m64n{bn}k16_bf16_k(" in body and f"tilex_wgmma_m64n{d}k16_bf16_rs_mn(" in body
    assert f"wgmma.mma_async.sync.aligned.m64n{d}k16.f32.bf16.bf16" in cuda
    assert re.search(r"\{%\d+, %\d+, %\d+, %\d+\}, %\d+, p, 1, 1, 1;", cuda)  # register A, transposed B
    # the k/v rings are filled by TMA (tests/test_streamed_tma.py), the resident q is stored swizzled and fenced
    assert "tilex_tma_box(" in body and "tilex_tile_to_smem" not in body
    assert "tilex_sw128<" in body and "tilex_fence_async_smem();" in body
    assert "ldmatrix" not in body and "tilex_mma16816" not in body and "stage [" not in body
    # p is packed from f32 once (no separate rounding pass into a bf16 copy)
    assert "tilex_round_bf16" not in body
    # two products in each of the two loops, whose bodies (with a product) are emitted once
    assert body.count("tilex_wgmma_wait<0>();") == 4 and "int tx_stage = 0;" in body


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89"])
def test_attention_prefill_falls_back_to_mma_sync(arch):
    fs, k, cuda = _compile(PREFILL, arch=arch, D=64, BM=64, BN=32, WARPS=4)
    assert [f.mma.strategy for f in fs] == ["mma", "mma"]
    assert all(f.mma.why == f"wgmma needs sm_90a (target {arch})" for f in fs)
    assert not any(t.swizzled for f in fs for t in f.stream) and k.info.align == 16
    assert "wgmma" not in cuda and "tilex_mma16816" in _body(cuda)


@pytest.mark.parametrize("defines, why", [
    (dict(D=256, BM=64, BN=32), "the 64-row products need WARPS=4 (WARPS=8)"),
    (dict(D=32), "wgmma reads 'kt' from 128-byte swizzled rows: its last dimension must be a multiple of 64 (it is 32)"),
    (dict(D=128, WARPS=4), "the 128-row products need WARPS=8 (WARPS=4)"),
    (dict(D=128, BM=32, WARPS=2), "wgmma needs a multiple of 64 rows (one warpgroup per 64): 'qt @ kt.T' has 32"),
])
def test_attention_prefill_obstacles(defines, why):
    fs, _, cuda = _compile(PREFILL, **defines)
    assert [f.mma.strategy for f in fs] == ["mma", "mma"]
    assert why in fs[0].mma.why
    assert "wgmma" not in cuda


def test_accumulators_past_the_register_budget_stay_on_mma_sync():
    """BM=256 over 16 warps leaves 128 registers per thread: accumulators of 128 + 32 columns / 2 plus the
    rest do not fit (ptxas aborted with C7602 here); the plan says so instead of emitting wgmma."""
    from tilex.pipeline import compile_program  # the plan: the mma.sync fallback then needs too much shared memory
    k = compile_program(PREFILL, "f.tile", Options(arch="sm_90a", defines=dict(D=64, BM=256, WARPS=16, BN=256)),
                        stop_after="choose_mma").kernels[0]
    fs = [f for f in loops(k) if f.pipelined]
    assert [f.mma.strategy for f in fs] == ["mma", "mma"]
    assert fs[0].mma.why == ("the products' accumulators take 160 registers per thread: with ~32 more they exceed "
                             "the 128 a thread of 16 warps can have")


def test_a_loop_with_products_in_an_inner_loop_stays_on_mma_sync():
    """An inner pipeline loop's product reads this loop's ring tile: the inner product is planned with the
    inner loop, so the outer ring must keep the padded rows mma.sync reads (wgmma packed A wrongly here)."""
    inner = TOY.replace("        acc = acc + s.to(bf16) @ kt\n",
                        "        acc = acc + s.to(bf16) @ kt\n"
                        "        for j in pipeline(0, 2, 1, stages = 2) {\n"
                        "            xt = q[m0 : m0 + BM, 0 : BN]\n"
                        "            acc = acc + xt @ kt\n"
                        "        }\n")
    fs, k, cuda = _compile(inner)
    assert fs[0].mma.strategy == "mma"
    assert fs[0].mma.why == "an inner loop multiplies tiles ('xt @ kt'): wgmma only when the products are this loop's"
    assert "wgmma" not in cuda and not any(t.swizzled for f in fs for t in f.stream)


def test_f32_attention_has_no_tensor_core_products():
    fs, _, _ = _compile(L.source("attention_prefill"), D=64, T="f32")
    assert all(f.mma is None for f in fs)


def test_one_ring_serves_k_major_and_n_major_operands():
    fs, k, cuda = _compile(TOY)
    assert fs[0].mma.strategy == "wgmma" and [t.swizzled for t in fs[0].stream] == [True]
    body = _body(cuda)
    assert "tilex_wgmma_m64n64k16_bf16_k(" in body and "tilex_wgmma_m64n64k16_bf16_rs_mn(" in body


@pytest.mark.parametrize("change, why", [
    # k also read into registers: its ring keeps padded rows
    (("        acc = acc + s.to(bf16) @ kt\n", "        acc = acc + s.to(bf16) @ kt\n        o[0, 0] = sum(kt.to(f32))\n"),
     "'kt' is also read into registers (its ring keeps padded rows for that)"),
    # A is neither resident nor in the product's row fragment
    (("        s = qt @ kt.T\n", "        s = (qt.to(f32) * 2.0).to(bf16) @ kt.T\n"),
     "the left operand of '(qt.to(f32) * 2.0).to(bf16) @ kt.T' is neither kept in shared memory nor in the "
     "product's row fragment in registers"),
])
def test_choose_mma_gives_mma_sync_for_what_the_memory_passes_find(change, why):
    fs, k, cuda = _compile(TOY.replace(*change))
    assert fs[0].mma.strategy == "mma" and fs[0].mma.why == why
    assert "wgmma" not in cuda and k.info.align == 16


@pytest.mark.parametrize("src, defines", [
    (PREFILL, dict(D=128)), (PREFILL, dict(D=64, BN=128)), (PREFILL, dict(D=128, BM=64, WARPS=4)),
    (L.source("attention_prefill_gqa"), {}),
    (TOY, {}), (TOY.replace("        s = qt @ kt.T\n", "        s = (qt.to(f32) * 2.0).to(bf16) @ kt.T\n"), {}),
    (TOY.replace("        acc = acc + s.to(bf16) @ kt\n", "        acc = acc + s.to(bf16) @ kt\n        o[0, 0] = sum(kt.to(f32))\n"), {}),
])
def test_the_choice_of_choose_mma_is_never_revised(src, defines):
    """The memory passes read `For.mma`; none of them changes it (they used to demote wgmma loops afterwards)."""
    from tilex.pipeline import compile_program

    opts = Options(arch="sm_90a", defines=defines)
    chosen = [f.mma for k in compile_program(src, "f.tile", opts, stop_after="choose_mma").kernels for f in loops(k)]
    final = [f.mma for k in compile_program(src, "f.tile", opts).kernels for f in loops(k)]
    assert chosen == final and any(m is not None for m in final)


def test_explain_lists_how_the_products_run(tmp_path):
    from typer.testing import CliRunner

    from tilex.cli import app

    f = tmp_path / "attention_prefill.tile"
    f.write_text(PREFILL)
    out = CliRunner().invoke(app, ["explain", str(f), "-D", "D=128"]).output
    assert "kt (128-byte swizzled), vt (128-byte swizzled) by TMA" in out
    assert "products:    line 47: wgmma (sm_90a), one warpgroup per 64 rows" in out
    # the register A operand is reported where it is (registers), the resident q in shared memory
    rows = {ln.split("│")[2].strip(): ln.split("│")[5].strip() for ln in out.splitlines() if ln.count("│") > 6}
    assert rows["p.to(bf16)"] == "registers" and rows["qt"] == "shared", rows
    out = CliRunner().invoke(app, ["explain", str(f), "-D", "D=64", "-D", "BM=64", "-D", "WARPS=4", "--arch", "sm_86"]).output
    assert "products:    line 47: mma.sync m16n8k16 (not wgmma: wgmma needs sm_90a (target sm_86))" in out


PTXAS = [dict(D=128, BN=64), dict(D=128, BN=128), dict(D=64, BN=64), dict(D=64, BN=128),
         dict(D=128, BM=64, WARPS=4), dict(D=128, STAGES=3)]


@pytest.mark.nvcc
@pytest.mark.parametrize("defines", PTXAS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_attention_prefill_wgmma_compiles_without_spills(defines, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    _, _, cuda = _compile(PREFILL, **defines)
    (tmp_path / "k.cu").write_text(cuda)
    proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "-Xptxas", "-v", "k.cu", "-o", "k.cubin"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stderr, proc.stderr[-3000:]
    assert "serialized" not in proc.stderr, proc.stderr[-3000:]  # ptxas C7520 and friends

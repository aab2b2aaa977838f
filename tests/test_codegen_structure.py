"""The shape of codegen (issue 21, item 2): collaborators instead of mixins, a scoped writer, the CUDA skeletons
and inline PTX in templates/, barriers decided by the plan_barriers pass, TMA maps computed once.

Byte-identical output is the goldens' job (test_golden*.py) and benchmarks/codegen_snapshot.py's; these tests
check the structure that keeps it maintainable, and the decisions the passes now hand to codegen.
"""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from tilex import codegen
from tilex.codegen import emit
from tilex.codegen.writer import Writer
from tilex.launchspec import make_spec
from tilex.passes.plan_barriers import ALL, Barrier, sync_plan
from tilex.passes.plan_tma import kernel_tma_maps
from tilex.pipeline import Options, compile_program
from tilex.translate import translate

ROOT = Path(__file__).resolve().parents[1]
CODEGEN = ROOT / "transpiler" / "codegen"
TEMPLATES = ROOT / "templates"

COLSUM = """kernel colsum<BM: int = 128, BN: int = 128, BK: int = 64>(a: bf16[M, K], b: bf16[K, N], y: out f32[N])
    where K % 8 == 0, N % 8 == 0
    grid (cdiv(M, BM), cdiv(N, BN))
{
    m = program_id(0) * BM
    n = program_id(1) * BN
    acc = zeros(f32[BM, BN])
    for k in pipeline(0, K, BK, stages = 3) {
        acc += a[m : m + BM, k : k + BK] @ b[k : k + BK, n : n + BN]
    }
    y[n : n + BN] = sum(acc, axis=0)
}
"""


# ---- modules
@pytest.mark.parametrize("path", sorted(CODEGEN.glob("*.py")), ids=lambda p: p.name)
def test_codegen_modules_are_a_few_hundred_lines(path):
    assert len(path.read_text().splitlines()) <= 500


def test_the_emitter_composes_parts_instead_of_mixing_them_in():
    assert emit.Emitter.__bases__ == (object,)
    em_source = inspect.getsource(emit)
    for part in ("ExprEmitter", "AccessEmitter", "ReductionEmitter", "ProductEmitter", "MainLoopEmitter",
                 "StreamEmitter", "GatherEmitter"):
        assert part in em_source


@pytest.mark.parametrize("path", sorted(CODEGEN.glob("*.py")), ids=lambda p: p.name)
def test_no_manual_depth_counting_outside_the_writer(path):
    if path.name == "writer.py":
        return
    assert not re.search(r"\.depth\s*[+-]=", path.read_text()), "indent with Writer.block()/indented()"


def _string_literals(tree: ast.AST) -> list[str]:
    """The string constants of a module (f-strings' literal parts included), docstrings left out."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


@pytest.mark.parametrize("path", sorted(CODEGEN.glob("*.py")), ids=lambda p: p.name)
def test_inline_ptx_lives_in_templates(path):
    """No PTX in codegen's Python strings: asm statements, instruction names, register declarations."""
    for text in _string_literals(ast.parse(path.read_text())):
        for ptx in ("asm volatile(\"{", "wgmma.mma_async", "ldmatrix.", "cp.async.", "mbarrier.", ".reg .", "setp."):
            assert ptx not in text, f"{path.name} spells PTX ({text!r}); it belongs in templates/"


def test_the_ptx_check_sees_an_f_string():
    tree = ast.parse('def f(n):\n    """wgmma.mma_async in a docstring is prose."""\n'
                     '    return f"asm volatile(\\"{{ wgmma.mma_async.m64n{n}k16 }}\\")"\n')
    assert any("wgmma.mma_async" in t for t in _string_literals(tree))
    assert not any("docstring" in t for t in _string_literals(tree))


@pytest.mark.parametrize("path", sorted(CODEGEN.glob("*.py")), ids=lambda p: p.name)
def test_codegen_has_no_function_level_imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = [n for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
            assert not inner, f"{path.name}:{node.name} imports inside a function"


def test_skeletons_are_templates():
    for name in ("stream_ring.j2", "gather.j2", "wgmma_fn.j2", "matmul_wgmma_parts.j2"):
        assert (TEMPLATES / name).exists()


# ---- the writer
def test_writer_scopes_indent_and_close():
    w = Writer()
    with w.block("if (a) {", None):
        w.emit("x = 1;")
        with w.block():
            w.unrolled(4, "y[tx_s] = 0;")
    with w.block("} else {"):
        w.emit("x = 2;")
    w.unrolled(1, "z = 0;")
    assert w.lines == ["if (a) {", "  x = 1;", "  {", "    #pragma unroll",
                       "    for (int tx_s = 0; tx_s < 4; ++tx_s) { y[tx_s] = 0; }", "  }",
                       "} else {", "  x = 2;", "}", "{ const int tx_s = 0; z = 0; }"]
    assert w.depth == 0


def test_writer_depth_is_restored_after_an_error():
    w = Writer()
    with pytest.raises(ValueError):
        with w.block("{"):
            raise ValueError("boom")
    assert w.depth == 0


def test_writer_capture_returns_unindented_lines_and_keeps_names_unique():
    w = Writer()
    with w.indented(3):
        text = w.capture(lambda: (w.emit(w.fresh("tx_a") + ";"), w.emit("{"), w.emit("}")))
        w.emit(w.fresh("tx_b"))
    assert text == "tx_a1;\n{\n}"
    assert w.lines == ["      tx_b2"] and w.depth == 0


# ---- barriers: decided by plan_barriers, spelled by codegen
def _kernel(src: str, arch: str):
    return compile_program(src, "k.tile", Options(arch=arch)).kernels[0]


def test_barriers_after_a_warp_specialized_loop_are_the_consumers_named_barrier():
    k = _kernel(COLSUM, "sm_90a")
    loop = next(i for i, s in enumerate(k.body.stmts) if getattr(s, "plan", None) is not None)
    assert k.body.stmts[loop].plan.strategy == "wgmma"
    consumers = k.body.stmts[loop].plan.consumers
    assert k.info.sync.stmts[: loop + 1] == (ALL,) * (loop + 1)
    assert set(k.info.sync.stmts[loop + 1:]) == {Barrier(1, consumers)}
    cuda = translate(COLSUM, "k.tile", Options(arch="sm_90a")).cuda
    after = cuda.split("sum(acc, axis=0)", 1)[1]
    assert f'asm volatile("bar.sync 1, {consumers};" ::: "memory");' in after  # the cross-warp combine
    assert "__syncthreads" not in after  # the producer warpgroup has returned: it would deadlock


def test_without_warp_specialization_every_barrier_is_syncthreads():
    k = _kernel(COLSUM, "sm_80")
    assert set(k.info.sync.stmts) == {ALL} and k.info.sync.start == ALL
    after = translate(COLSUM, "k.tile", Options(arch="sm_80")).cuda.split("sum(acc, axis=0)", 1)[1]
    assert "__syncthreads();" in after and "bar.sync" not in after


def test_a_persistent_tile_loop_runs_on_the_named_barrier():
    src = (ROOT / "examples" / "bmm_persistent.tile").read_text()
    k = _kernel(src, "sm_90a")
    outer = next(i for i, s in enumerate(k.body.stmts) if type(s).__name__ == "For")
    inner = next(s for s in k.body.stmts[outer].body.stmts if getattr(s, "plan", None) is not None)
    assert inner.plan.persistent
    assert k.info.sync.stmts[outer:] == (Barrier(1, inner.plan.consumers),) * (len(k.body.stmts) - outer)
    assert sync_plan(k) == k.info.sync


def test_the_barrier_pass_is_in_the_pipeline_and_dumpable():
    from tilex.pipeline import PASS_NAMES

    assert PASS_NAMES.index("plan_barriers") == PASS_NAMES.index("budget_smem") + 1
    p = compile_program(COLSUM, "k.tile", Options(arch="sm_90a"), stop_after="budget_smem")
    assert p.kernels[0].info.sync is None  # set by plan_barriers, not before


# ---- TMA maps: once, by plan_tma, read by the launch spec and codegen
@pytest.mark.parametrize("path", [ROOT / "examples" / "bmm.tile", ROOT / "examples" / "head_scores.tile",
                                  ROOT / "stdlib_kernels" / "attention_prefill.tile"], ids=lambda p: p.stem)
def test_tma_maps_are_computed_once_and_shared(path):
    src = path.read_text()
    t = translate(src, str(path), Options(arch="sm_90a"))
    assert any(k.info.tma_maps for k in t.program.kernels)
    for k in t.program.kernels:
        assert k.info.tma_maps == kernel_tma_maps(k)
        assert make_spec(k, src).tma == k.info.tma_maps
        assert codegen.emit.Emitter(k, "x.tile").tma_maps is k.info.tma_maps
        for m in k.info.tma_maps:
            assert f"const __grid_constant__ tilex_tmap {m.param}" in t.cuda


def test_dump_after_plan_barriers_shows_the_plan():
    from tilex.explain import dump_ir

    text = dump_ir(compile_program(COLSUM, "k.tile", Options(arch="sm_90a"), stop_after="plan_barriers"))
    assert "  barriers: __syncthreads from line 5; bar.sync 1, 256 from line 11\n" in text
    before = dump_ir(compile_program(COLSUM, "k.tile", Options(arch="sm_90a"), stop_after="budget_smem"))
    assert "barriers:" not in before

"""The tensor-core paths show in the PTX nvcc produces (CPU only): wgmma + TMA + setmaxnreg for sm_90a,
mma.sync + ldmatrix + cp.async for sm_80 (and for sm_90a when TMA's alignment is not proven)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tilex.pipeline import Options
from tilex.translate import translate

pytestmark = pytest.mark.nvcc
ROOT = Path(__file__).resolve().parents[1]
LINEAR = ROOT / "stdlib_kernels" / "linear.tile"


def _ptx(tmp_path: Path, kernel: str, arch: str, gencode: list[str]) -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    t = translate(LINEAR.read_text(), str(LINEAR), Options(arch=arch, kernel=kernel))
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = subprocess.run([nvcc, "-ptx", *gencode, "k.cu", "-o", "k.ptx"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (tmp_path / "k.ptx").read_text()


@pytest.mark.parametrize("kernel", ["linear", "gated_mlp", "linear_bias", "linear_persistent"])
def test_sm90a_uses_wgmma_and_tma(tmp_path, kernel):
    ptx = _ptx(tmp_path, kernel, "sm_90a", ["-gencode=arch=compute_90a,code=sm_90a"])
    for insn in ("wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier.try_wait", "setmaxnreg"):
        assert insn in ptx, f"{insn} missing from the sm_90a PTX of {kernel}"
    assert "mma.sync" not in ptx


@pytest.mark.parametrize("kernel,arch,gencode", [("linear", "sm_80", ["-arch=sm_80"]), ("linear_persistent", "sm_80", ["-arch=sm_80"]),
                                                 ("linear_any", "sm_90a", ["-gencode=arch=compute_90a,code=sm_90a"])])
def test_mma_sync_path(tmp_path, kernel, arch, gencode):
    ptx = _ptx(tmp_path, kernel, arch, gencode)
    for insn in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned", "cp.async.cg.shared.global"):
        assert insn in ptx, f"{insn} missing from the {arch} PTX of {kernel}"
    assert "wgmma" not in ptx


def test_plan_reasons():
    """Without `where K % 8 == 0` TMA's alignment is unproven: the loop falls back to mma.sync and says why."""
    from tilex.pipeline import compile_program
    from tilex.passes.base import Walker

    prog = compile_program(LINEAR.read_text(), str(LINEAR), Options(arch="sm_90a", kernel="linear_any"))
    plans = []

    class F(Walker):
        def on_For(self, s):
            plans.append(s.plan)

    F().walk(prog.kernels[0].body)
    assert plans[0].strategy == "mma" and "K % 8 == 0" in plans[0].why


def test_fused_epilogue_compiles_on_the_wgmma_path(tmp_path):
    """Scale, bias, gelu and a residual add after the loop: one wgmma kernel, no shared-memory round trip
    for the epilogue, built by nvcc for sm_90a."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_matmul_gpu import EPILOGUE

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    t = translate(EPILOGUE, "epilogue.tile", Options(arch="sm_90a"))
    assert "wgmma.mma_async" in t.cuda
    assert "layout conversion" not in t.cuda  # the epilogue runs on the accumulator fragments in registers
    (tmp_path / "k.cu").write_text(t.cuda)
    proc = subprocess.run([nvcc, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "k.cu", "-o", "k.cubin"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]

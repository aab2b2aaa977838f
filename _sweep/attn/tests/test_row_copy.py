"""The streamed row copy (tilex_tile_to_smem) and the register reads of bf16 stages: the generated code's
shape, and that softmax / rms_norm compile at edge shapes of their configs (no GPU needed)."""
from __future__ import annotations

import subprocess

import pytest

from tilex.pipeline import Options
from tilex.stdlib import _launch as L
from tilex.translate import translate

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _cuda(name: str, **defines) -> str:
    path = ROOT / "stdlib_kernels" / f"{name}.tile"
    return translate(path.read_text(), str(path), Options(arch="sm_90a", defines=defines)).cuda


def test_tile_copy_has_a_branch_free_fast_path():
    """One 64-bit base, a cp.async per chunk that zero-fills (ignore-src) past the row's end; the old per-chunk
    path stays for edge tiles."""
    cuda = _cuda("softmax", **L.row_config(4096, 1024))
    assert "tilex_cp_async16_or_zero(dst + (r * LDS + c), src + (r * (int)ld + c), c < rem);" in cuda
    assert "cp.async.cg.shared.global [%0], [%1], 16, p;" in cuda
    assert "(left >= COLS || left % 8 == 0)" in cuda  # a partial chunk goes the element-by-element way


def test_bf16_stage_reads_unpack_words():
    cuda = _cuda("rms_norm", **L.row_config(4096, 1024))
    assert "tilex_unpack16<tilex_bf16, float>" in cuda
    assert "__uint_as_float(w[k] & 0xffff0000u)" in cuda


def test_arange_view_is_not_materialized():
    cuda = _cuda("softmax", **L.row_config(1000, 64))
    assert "t[tx_s] = ((tilex_wadd<int>(0, " in cuda
    assert "int tx_tv" not in cuda.split("softmax.tile:19")[1].split("softmax.tile:20")[0]


@pytest.mark.nvcc
@pytest.mark.parametrize("name,n,m", [("softmax", 1, 1), ("softmax", 7, 3), ("softmax", 1000, 5), ("softmax", 32000, 2),
                                      ("rms_norm", 5, 1), ("rms_norm", 4095, 3), ("layer_norm", 33, 2)])
def test_edge_shapes_compile(name, n, m, tmp_path, nvcc):
    from tilex.stdlib.activations import softmax_config

    cfg = softmax_config(n, m, "bf16", 132) if name == "softmax" else L.row_config(n, m)
    if name == "layer_norm":
        cfg["EXACT"] = cfg["ONE_PASS"] and cfg["BLOCK"] == n
    cu = tmp_path / "k.cu"
    cu.write_text(_cuda(name, **cfg))
    r = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", str(cu), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_loads_of_written_tensors_skip_the_read_only_path():
    """(review) __ldg (ld.global.nc) is only for data read-only for the kernel's lifetime: loads of a tensor the
    kernel writes (fused_add_rms_norm_inplace's x and residual) take the coherent path, the others keep it."""
    src = """
kernel k<B: int = 64>(x: out bf16[N], y: bf16[N])
    grid (cdiv(N, B),)
{
    i = program_id(0) * B
    a = x[i : i + B].to(f32)
    b = y[i : i + B].to(f32)
    x[i : i + B] = (a + b).to(bf16)
}
"""
    cuda = translate(src, "k.tile", Options(arch="sm_90a")).cuda
    assert "tilex_load_chunk<8, tilex_bf16, float, false>(&" in cuda  # x: written by the kernel
    assert "tilex_load_chunk<8, tilex_bf16, float>(&" in cuda  # y: read only
    assert "NC ? __ldg(" in cuda

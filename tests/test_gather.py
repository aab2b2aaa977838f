"""Gathers and scatters through index tiles: `table[ids, 0 : D]` reads one row per index.

Interpreter against NumPy fancy indexing (invalid indices read `other=` and are skipped when
stored), the shape rules and their errors, nvcc builds of the generated CUDA, and (GPU) the
kernel against the interpreter.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import tilex
from tilex.diagnostics import CompileError
from tilex.pipeline import Options
from tilex.translate import translate

SRC = """
# rows of a table through an index tile (a paged-cache style 2-index gather too), scattered back
kernel g<T: int = 8, B: int = 32>(ids: i32[N], blk: i32[N], table: f32[V, D], pages: f32[P, S, D],
                                  o: out f32[N, D], o2: out f32[N, D], dst: out f32[V, D])
    grid (cdiv(N, T),)
{
    r = program_id(0) * T
    idx = ids[r : r + T, other = -1]
    rows = table[idx, 0 : B, other = 7.0]
    o[r : r + T, 0 : B] = rows * 2.0
    b = blk[r : r + T]
    o2[r : r + T, 0 : B] = pages[b // S, b % S, 0 : B]
    dst[idx, 0 : B, distinct = True] = rows + 1.0
}
"""


def _inputs(seed, n=13, v=20, d=30, p=5, s=4):
    rng = np.random.default_rng(seed)
    ids = rng.integers(-2, v + 2, n).astype(np.int32)
    blk = rng.integers(0, p * s, n).astype(np.int32)
    table = rng.standard_normal((v, d)).astype(np.float32)
    pages = rng.standard_normal((p, s, d)).astype(np.float32)
    return ids, blk, table, pages


def _reference(ids, blk, table, pages):
    v, d = table.shape
    ok = (ids >= 0) & (ids < v)
    o = np.where(ok[:, None], table[np.clip(ids, 0, v - 1)], 7.0) * 2.0
    s = pages.shape[1]
    o2 = pages[blk // s, blk % s]
    dst = np.zeros_like(table)
    dst[ids[ok]] = table[ids[ok]] + 1.0
    return o, o2, dst


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interpreter_matches_numpy(seed):
    ids, blk, table, pages = _inputs(seed)
    ids = np.unique(ids)[: len(ids)]  # the scatter is marked distinct = True (repeats raise: test_atomics.py)
    blk = blk[: len(ids)]
    n, d = len(ids), table.shape[1]
    o, o2, dst = np.full((n, d), np.nan, np.float32), np.full((n, d), np.nan, np.float32), np.zeros_like(table)
    tilex.compile(SRC).interp("g", ids, blk, table, pages, o, o2, dst)
    ro, ro2, rdst = _reference(ids, blk, table, pages)
    np.testing.assert_array_equal(o, ro)
    np.testing.assert_array_equal(o2, ro2)
    np.testing.assert_array_equal(dst, rdst)


def test_shape_is_index_length_then_slices():
    from tilex.pipeline import compile_program

    k = compile_program(SRC, "g.tile", Options()).kernels[0]
    rows = next(s for s in k.body.stmts if getattr(s, "name", None) == "rows")
    assert rows.value.ty.shape == (8, 32)


@pytest.mark.parametrize("body, message", [
    ("    idx = x[0 : 8]\n    y[idx, 0 : 8] = t[0 : 8, 0 : 8]", "an index must be an integer, got f32"),
    ("    idx = ids[0 : 8]\n    y[0 : 8, idx] = t[0 : 8, 0 : 8]", "index tiles must come before the slices"),
    ("    idx = ids[0 : 8]\n    j = ids[0 : 16]\n    y[idx, j] = x[0 : 8]", "index tiles of 'y' must have one length, got 8 and 16"),
    ("    m = t[0 : 8, 0 : 8].to(i32)\n    y[m, 0 : 8] = t[0 : 8, 0 : 8]", "an index tile must be 1-D"),
])
def test_errors(body, message):
    src = f"kernel f(x: f32[N], ids: i32[N], t: f32[N, N], y: out f32[N, N])\n    grid (1,)\n{{\n{body}\n}}\n"
    with pytest.raises(CompileError) as e:
        translate(src, "k.tile")
    assert message in e.value.message


@pytest.mark.nvcc
@pytest.mark.parametrize("arch, flags", [("sm_90a", ["-gencode=arch=compute_90a,code=sm_90a"]), ("sm_80", ["-arch=sm_80"])])
def test_compiles(tmp_path, arch, flags):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found on PATH")
    (tmp_path / "k.cu").write_text(translate(SRC, "g.tile", Options(arch=arch)).cuda)
    proc = subprocess.run([nvcc, "-cubin", *flags, "k.cu", "-o", "k.cubin"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [0, 1])
def test_gpu_matches_interpreter(seed):
    cp = pytest.importorskip("cupy")
    ids, blk, table, pages = _inputs(seed, n=1000, v=700, d=70, p=50, s=16)
    ids = np.random.default_rng(seed).permutation(np.arange(-5, 995)).astype(np.int32)  # distinct, some invalid
    n, d = len(ids), table.shape[1]
    mod = tilex.compile(SRC)
    outs = [np.full((n, d), np.nan, np.float32), np.full((n, d), np.nan, np.float32), np.zeros_like(table)]
    dev = [cp.asarray(a) for a in outs]
    mod.g(cp.asarray(ids), cp.asarray(blk), cp.asarray(table), cp.asarray(pages), *dev)
    mod.interp("g", ids, blk, table, pages, *outs)
    for got, want in zip(dev, outs):
        np.testing.assert_array_equal(cp.asnumpy(got), want)

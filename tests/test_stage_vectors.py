"""Register tiles staged in shared memory for a product (codegen/products.py `stage`) are stored as vectors of
exactly `vec` elements of the tile's dtype: the vector type's size is vec x the element's bytes.

Before the stage width was computed from the dtype's size, a non-16-bit element counted 4 bytes: an f8e4m3
tile's rows of 8 went out element by element (a 32-byte "vector" is not a store), and a row of 4 would have
been copied as 16 bytes from a 4-byte array. The GPU case runs the f8e4m3 product against the interpreter.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import tilex
from tilex.types import DType

VECTOR_BYTES = {"unsigned": 4, "uint2": 8, "uint4": 16}
STAGED = re.compile(r"(\w+) tx_v\[(\d+)\];[^\n]*?reinterpret_cast<(unsigned|uint2|uint4)\*>\(&tx_[AB]s\[")


def _source(dt: str, t: int) -> str:
    # `x * 2` keeps a in registers, so both operands are staged by `stage` (f32 FMAs: no tensor cores for fp8)
    return (f"kernel mm(a: {dt}[M, K], b: {dt}[K, N], c: out f32[M, N]) grid (cdiv(M, {t}), cdiv(N, {t})) {{\n"
            f"    m = program_id(0) * {t}\n    n = program_id(1) * {t}\n    acc = zeros(f32[{t}, {t}])\n"
            f"    for k in range(0, K, {t}) {{\n        x = a[m : m + {t}, k : k + {t}] * 2\n"
            f"        acc += x.to({dt}) @ b[k : k + {t}, n : n + {t}]\n    }}\n"
            f"    c[m : m + {t}, n : n + {t}] = acc\n}}\n")


@pytest.mark.parametrize("dt", ["f8e4m3", "bf16", "f16", "f32"])
@pytest.mark.parametrize("t", [8, 16, 32])
def test_staged_vectors_hold_vec_elements(dt, t):
    cuda = tilex.translate(_source(dt, t), "mm.tile").cuda
    assert "tx_As" in cuda and "tx_Bs" in cuda  # the operands are staged in shared memory
    stores = STAGED.findall(cuda)
    for ctype, vec, vtype in stores:
        assert ctype == DType(dt).ctype
        assert VECTOR_BYTES[vtype] == int(vec) * DType(dt).itemsize, (ctype, vec, vtype)
    if dt == "f8e4m3":  # rows of 8 one-byte elements: one 8-byte store each
        assert stores and {(v, vt) for _, v, vt in stores} == {("8", "uint2")}


@pytest.mark.nvcc
def test_staged_fp8_product_compiles(tmp_path, nvcc):
    (tmp_path / "k.cu").write_text(tilex.translate(_source("f8e4m3", 16), "mm.tile").cuda)
    proc = subprocess.run([nvcc, "-cubin", "-arch=sm_90a", "k.cu", "-o", "k.cubin"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.gpu
@pytest.mark.parametrize("t", [8, 16])
def test_staged_fp8_product_matches_the_interpreter(t, tmp_path):
    torch = pytest.importorskip("torch")
    import ml_dtypes

    rng = np.random.default_rng()
    m, k, n = (int(v) for v in rng.integers(1, 100, 3))
    f8 = ml_dtypes.float8_e4m3fn
    da = torch.from_numpy(rng.standard_normal((m, k), dtype=np.float32)).to(torch.float8_e4m3fn).cuda()
    db = torch.from_numpy(rng.standard_normal((k, n), dtype=np.float32)).to(torch.float8_e4m3fn).cuda()
    a, b = (x.cpu().view(torch.uint8).numpy().view(f8) for x in (da, db))
    mod = tilex.compile(_source("f8e4m3", t), cache_dir=tmp_path)
    c = torch.full((m, n), float("nan"), device="cuda")
    mod.mm(da, db, c)
    ref = np.full((m, n), np.nan, np.float32)
    mod.interp("mm", a, b, ref)
    want = (2 * a.astype(np.float64)).astype(f8).astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-4)  # the oracle: float64 NumPy
    np.testing.assert_allclose(c.cpu().numpy(), ref, rtol=1e-5, atol=1e-4)

"""GPU: every elementwise math builtin (`BuiltinKind.MATH`) gives the interpreter's numbers, on random and edge
inputs (±0, ±inf, NaN, subnormals, huge), so CUDA_MATH and NUMPY_MATH stay numerically equivalent
(docs/internals.md, "Adding a builtin"). One kernel computes every function, a row each, so a new row of the
table is covered once it is there. Tolerances: the device's approximations (ex2.approx, rcp.approx) are a few
ulp of their own arguments; flushed subnormal results are within `ATOL`. Run: pytest -m gpu tests/test_math_table_gpu.py
"""
from __future__ import annotations

import numpy as np
import pytest

import tilex
from tilex.builtins import FUNCTIONS, BuiltinKind

pytestmark = pytest.mark.gpu

MATH = [name for name, b in FUNCTIONS.items() if b.kind is BuiltinKind.MATH]
RTOL = {name: 1e-5 for name in MATH}  # relative to the interpreter's result
RTOL.update(floor=0.0, ceil=0.0)  # exact
ATOL = 1e-6
EDGES = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, -1e-38,
                  88.0, -88.0, 100.0, -100.0, 1e4, -1e4, 3.4e38, -3.4e38, 2.5, -2.5, 126.0, -126.5, -150.0],
                 np.float32)


def _source() -> str:
    rows = "\n".join(f"    y[{r}, i : i + 256] = {name}(t)" for r, name in enumerate(MATH))
    return (f"kernel k(x: f32[N], y: out f32[{len(MATH)}, N])\n    grid (cdiv(N, 256),)\n{{\n"
            f"    i = program_id(0) * 256\n    t = x[i : i + 256]\n{rows}\n}}\n")


def test_every_math_builtin_matches_the_interpreter_on_the_gpu(tmp_path):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng()
    x = np.concatenate([EDGES, rng.uniform(-10, 10, 2000).astype(np.float32),
                        (rng.standard_normal(1000) * 60).astype(np.float32),
                        rng.uniform(-1e-3, 1e-3, 500).astype(np.float32)])
    x = x[rng.permutation(x.size)]  # edges in random places: every lane, partial last tile
    mod = tilex.compile(_source(), cache_dir=tmp_path)
    gpu = cp.full((len(MATH), x.size), np.nan, np.float32)
    mod.k(cp.asarray(x), gpu)
    ref = np.full((len(MATH), x.size), np.nan, np.float32)
    with np.errstate(all="ignore"):
        mod.interp("k", x, ref)
    got = cp.asnumpy(gpu)
    bad = []
    for r, name in enumerate(MATH):
        try:
            np.testing.assert_allclose(got[r], ref[r], rtol=RTOL[name], atol=ATOL, equal_nan=True)
        except AssertionError:
            diff = ~np.isclose(got[r], ref[r], rtol=RTOL[name], atol=ATOL, equal_nan=True)
            bad.append(f"{name}: {int(diff.sum())} of {x.size} differ, e.g. x={x[diff][:4].tolist()} "
                       f"gpu={got[r][diff][:4].tolist()} interp={ref[r][diff][:4].tolist()}")
    assert not bad, "\n".join(bad)
